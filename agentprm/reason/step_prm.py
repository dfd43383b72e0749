"""A step PRM for reasoning: the policy's backbone with a scalar head, scoring every line of a solution in one forward.

The question's prompt, then the solution's lines, each closed by "\\n"; step k's logit f_k is read at the newline
that closes line k, which (causal attention) sees the question and lines 0..k only — the score of the prefix that
ends at step k, for all steps at the cost of one sequence. p_k = σ(f_k).

Objectives (`StepPRMConfig.loss`), on Monte-Carlo step labels (labels.py) of the policy's own solutions:

    bce   per-step cross-entropy of σ(f_k) against the soft label (Math-Shepherd's soft estimate) or the hard one
    pqm   PQM's comparative loss (prm/pqm.py, arXiv 2410.11287) with the first error at the first step whose hard
          label is 0 (no completion from there ended right) — the same labels, ranked instead of regressed
    orm   an outcome reward model for comparison: cross-entropy of the *last* step's logit against the outcome only

Best-of-N reads a solution's step scores through an aggregation: `min` (the weakest step), `last`, or `product`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForSequenceClassification

from agentprm.agent.encoding import read_json_object
from agentprm.agent.scoring import right_pad
from agentprm.errors import UserError, require
from agentprm.io import write_json
from agentprm.models import load_tokenizer
from agentprm.models.presets import load_weights
from agentprm.outputs import atomic_dir
from agentprm.prm.model import quiet_transformers
from agentprm.prm.pqm import pqm_loss
from agentprm.reason.check import steps
from agentprm.reason.config import AGGREGATIONS, StepPRMConfig
from agentprm.reason.labels import StepExample
from agentprm.reason.model import CONFIG_FILE, prompt_ids
from agentprm.reason.problems import Problem
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

KIND = "step-prm"


class StepPRM(nn.Module):
    def __init__(self, lm, tokenizer):
        super().__init__()
        self.lm, self.tokenizer = lm, tokenizer
        self.newline = tokenizer("\n", add_special_tokens=False)["input_ids"][-1]

    @classmethod
    def from_reasoner(cls, folder: str | Path, seed: int = 0) -> StepPRM:
        """The reasoner's backbone (a model folder) with a new scalar head; `seed` fixes the head. A folder that
        `save` wrote loads with its trained head."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            with quiet_transformers():   # its load report lists the new head as "MISSING": expected here
                lm = load_weights(AutoModelForSequenceClassification, Path(folder), num_labels=1)
        tokenizer = load_tokenizer(folder)
        lm.config.pad_token_id = tokenizer.pad_token_id
        return cls(lm, tokenizer)

    @classmethod
    def load(cls, folder: str | Path) -> StepPRM:
        """A step PRM `save` wrote (a one-line error for any other folder: a reasoner would load with a random head)."""
        meta = Path(folder) / CONFIG_FILE
        info = read_json_object(meta) if meta.is_file() else {}
        if info.get("kind") != KIND:
            raise UserError(f"{folder}: not a step PRM folder ({CONFIG_FILE} kind is {info.get('kind')!r}, "
                            f"expected {KIND!r})")
        return cls.from_reasoner(folder)

    def save(self, folder: str | Path, **info) -> None:
        """Weights (safetensors, the head included), tokenizer and `info` (kind "step-prm"), written atomically."""
        with atomic_dir(folder) as tmp:
            self.lm.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            write_json(tmp / CONFIG_FILE, {"kind": KIND, **info})

    def encode(self, problem: Problem, lines: Sequence[str]) -> tuple[list[int], list[int]]:
        """Token ids of prompt ⊕ lines (each closed by a newline) and the position of each closing newline."""
        ids, ends = prompt_ids(self.tokenizer, problem), []
        for line in lines:
            ids += self.tokenizer(line, add_special_tokens=False)["input_ids"] + [self.newline]
            ends.append(len(ids) - 1)
        return ids, ends

    def step_logits(self, problems: Sequence[Problem], solutions: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        encoded = [self.encode(p, lines) for p, lines in zip(problems, solutions)]
        device = next(self.parameters()).device
        ids, mask = right_pad([e[0] for e in encoded], self.tokenizer.pad_token_id)
        hidden = self.lm.base_model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        rows = torch.tensor([b for b, (_, ends) in enumerate(encoded) for _ in ends], dtype=torch.long)
        cols = torch.tensor([k for _, ends in encoded for k in ends], dtype=torch.long)
        logits = self.lm.score(hidden[rows.to(device), cols.to(device)]).squeeze(-1).float()
        return list(torch.split(logits, [len(ends) for _, ends in encoded]))

    @torch.no_grad()
    def step_scores(self, problems: Sequence[Problem], solutions: Sequence[str], batch_size: int = 64
                    ) -> list[list[float]]:
        """σ(f_k) for every step of every solution (text)."""
        self.eval()
        out: list[list[float]] = []
        for k in range(0, len(problems), batch_size):
            lines = [steps(s) or [""] for s in solutions[k:k + batch_size]]
            out += [torch.sigmoid(x).tolist() for x in self.step_logits(problems[k:k + batch_size], lines)]
        return out


def aggregate(scores: Sequence[float], how: str) -> float:
    require(how in AGGREGATIONS, f"aggregation must be one of {', '.join(AGGREGATIONS)}, not {how!r}")
    if how == "min":
        return min(scores)
    if how == "last":
        return scores[-1]
    product = 1.0
    for s in scores:
        product *= s
    return product


class StepLoss:
    """`loss_fn(prm, batch)` for the training core."""

    def __init__(self, cfg: StepPRMConfig):
        self.cfg = cfg

    def __call__(self, prm: StepPRM, batch: Sequence[StepExample]) -> tuple[torch.Tensor, dict]:
        logits = prm.step_logits([e.problem for e in batch], [e.lines for e in batch])
        if self.cfg.loss == "pqm":
            firsts = [next((k for k, h in enumerate(e.hard) if h == 0), len(e.hard)) for e in batch]
            return torch.stack([pqm_loss(q, t, self.cfg.zeta) for q, t in zip(logits, firsts)]).mean(), {}
        if self.cfg.loss == "orm":
            last = torch.stack([q[-1] for q in logits])
            target = torch.tensor([e.outcome for e in batch], device=last.device)
            return F.binary_cross_entropy_with_logits(last, target), {}
        flat = torch.cat(logits)
        target = torch.tensor([float(v) for e in batch for v in (e.soft if self.cfg.labels == "soft" else e.hard)],
                              device=flat.device)
        return F.binary_cross_entropy_with_logits(flat, target), {}


def train_step_prm(prm: StepPRM, examples: Sequence[StepExample], cfg: StepPRMConfig, seed: int = 0,
                   progress: bool = False) -> list[dict]:
    cfg.check()
    require(bool(examples), "step PRM: no labelled solutions to train on")
    prm.train()
    return train(prm, list(examples), StepLoss(cfg), TrainConfig(lr=cfg.lr, steps=cfg.steps, batch_size=cfg.batch_size,
                                                             seed=seed, log_every=max(1, cfg.steps // 20)),
                 description=f"step PRM {cfg.loss}", progress=progress,
                 length=lambda e: sum(len(x) for x in e.lines))
