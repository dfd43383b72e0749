"""`ProcessRewardModel`: Q_φ(s, a) = σ(head(LM_φ(prompt(s) ⊕ a))), a scalar head on the reply's last token.

    prm = ProcessRewardModel.init("runs/sft", seed=0)   # any local HF causal-LM folder, or a preset ("tiny")
    q = prm.score(states, replies)                        # tensor (N,) of Q in [0, 1], one batched call
    prm.save("runs/prm"); prm = ProcessRewardModel.load("runs/prm")

Architecture: the policy's backbone as `AutoModelForSequenceClassification(num_labels=1)` (for Llama/Qwen/Mistral
folders the backbone weights load and only the 1×hidden `score` head is new), so a saved PRM is a plain HF folder
(safetensors) that `AutoModelForSequenceClassification.from_pretrained` reads. We pool ourselves, at the last
position of the attention mask, instead of HF's "rightmost token that is not pad": checkpoints whose pad token is
the EOS token would otherwise pool one token early, since every reply ends with EOS. Sequences are
`encoding.prompt_ids(state) + encoding.reply_ids(reply)`, right-padded: the PRM sees exactly the ids the policy
scored. `agentprm.json` holds the PromptConfig (inherited from the init folder unless the PRM was given inputs of its
own, `PrmConfig.history_turns` / `show_admissible`) and "kind": "prm".

**A prior** (`prior_weight` w > 0; docs/algorithms.md §1): Q_φ(s, a) = σ(f_φ(s, a) + w · log π_ref(a | s)), with
π_ref the frozen policy the PRM was initialised from, saved with it under `prior/`. A plain PRM fitted to Q-targets
forgets the policy's ranking of its own alternatives at a state, the one thing Best-of-N and the updates ask of it
(docs/results.md, "The critic's learning curve"); with the prior the head learns a residual on that ranking, the
form of the KL-regularised optimum (log π* = log π_ref + Q/β − log Z). Best-of-N and the updates compare one
state's replies, where the term is exactly the policy's preference; beam search compares states too, where it adds
the reply's likelihood to the state's value. The prior reads the state through its own policy's prompt (saved as
`prior/agentprm.json`), which may differ from the PRM's: a critic shown more history or the admissible commands keeps
π_ref's preference as π_ref computes it.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, LlamaForSequenceClassification, PreTrainedModel
from transformers.utils import logging as hf_logging

from agentprm.agent.encoding import CONFIG_FILE, PromptConfig, prompt_ids, read_json_object, reply_ids
from agentprm.agent.scoring import pack_row, packed_hidden, right_pad, score_candidates
from agentprm.agent.state import AgentState
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.errors import UserError
from agentprm.outputs import atomic_dir
from agentprm.models.device import place
from agentprm.models.presets import (ADAPTER_CONFIG, PRESETS, load_causal_lm, load_tokenizer, load_weights, preset_config,
                                     resolve_model)
from agentprm.train.distributed import is_main

KIND = "prm"
PRIOR_DIR = "prior"


@dataclass
class Prior:
    """The frozen reference policy π_ref of a PRM with a prior, and the weight w of log π_ref(a | s) in its logit.
    (A plain holder, so the policy is neither a trained parameter of the PRM nor in its state dict.) `prompt` is the
    policy's own prompt: how π_ref reads a state, whatever the PRM reads."""
    policy: PreTrainedModel
    weight: float
    prompt: PromptConfig


class ProcessRewardModel(nn.Module):
    def __init__(self, lm: PreTrainedModel, tokenizer, prompt: PromptConfig):
        super().__init__()
        if not hasattr(lm, "score"):
            raise UserError(f"{type(lm).__name__}: no scalar 'score' head (not a decoder sequence classifier)")
        self.lm, self.tokenizer, self.prompt = lm, tokenizer, prompt
        self.prior: Prior | None = None

    @classmethod
    def init(cls, source: str | Path, seed: int = 0) -> ProcessRewardModel:
        """A PRM from a causal-LM folder (backbone, tokenizer and PromptConfig kept; new head) or a preset name
        (fresh weights, env tokenizer, default prompt). `seed` fixes the new weights; the global RNG is untouched."""
        folder = resolve_model(source)   # a folder, or a packaged model's name (smollm2-135m)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if folder.is_dir():
                tokenizer = load_tokenizer(folder)
                _ensure_pad(tokenizer)
                with quiet_transformers():  # its load report lists the new head as "MISSING": expected here
                    lm = _load_classifier(folder, pad_token_id=tokenizer.pad_token_id)
                return cls(lm, tokenizer, PromptConfig.load(folder))
            if str(source) in PRESETS:
                tokenizer = build_tokenizer()
                config = preset_config(str(source), tokenizer)
                config.num_labels = 1
                return cls(place(LlamaForSequenceClassification(config)), tokenizer, PromptConfig())
        raise UserError(f"--init {source}: neither a model folder nor a preset (presets: {', '.join(PRESETS)})")

    @classmethod
    def load(cls, folder: str | Path) -> ProcessRewardModel:
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise UserError(f"{folder}: no such PRM folder")
        meta = folder / CONFIG_FILE
        info = read_json_object(meta) if meta.is_file() else {}
        if info.get("kind") != KIND:
            raise UserError(f"{folder}: not a PRM folder ({CONFIG_FILE} kind is {info.get('kind')!r}, expected {KIND!r})")
        weight = info.get("prior_weight", 0.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
            raise UserError(f"{meta}: field 'prior_weight' must be a number >= 0, got {weight!r}")
        tokenizer = load_tokenizer(folder)
        prm = cls(_load_classifier(folder, pad_token_id=tokenizer.pad_token_id), tokenizer, PromptConfig.load(folder))
        if weight:   # a PRM saved before the prior kept its own prompt read states as the prior did
            own = folder / PRIOR_DIR / CONFIG_FILE
            prm.prior = Prior(_frozen(load_causal_lm(folder / PRIOR_DIR)), float(weight),
                              PromptConfig.load(own.parent) if own.is_file() else prm.prompt)
        return prm

    def attach_prior(self, policy_dir: str | Path, weight: float) -> None:
        """Score with w · log π_ref(a | s) added to the logit, π_ref the policy in `policy_dir` (frozen), reading
        states through its own prompt. It must share the PRM's tokenizer: the PRM is initialised from that folder."""
        folder = Path(policy_dir).expanduser()
        if not folder.is_dir():
            raise UserError(f"prior_weight {weight}: the prior is a policy's log π (by default the policy the PRM "
                            f"starts from), and {policy_dir} "
                            "is not a policy folder (init the PRM from one, or set prior_weight 0)")
        if load_tokenizer(folder).get_vocab() != self.tokenizer.get_vocab():
            raise UserError(f"{folder}: its tokenizer is not the PRM's, so it cannot score the PRM's sequences as a "
                            "prior")
        self.prior = Prior(_frozen(load_causal_lm(folder)), weight, PromptConfig.load(folder))

    @torch.no_grad()
    def prior_offsets(self, states: Sequence[AgentState], prompts: Sequence[Sequence[int]],
                      replies: Sequence[Sequence[int]], batch_size: int = 32) -> torch.Tensor:
        """w · log π_ref(reply | s) per row (zeros without a prior), float32 on the CPU; `prompts` are the PRM's
        own prompt ids of `states`; a state's rows are scored in one packed row (`_prior_packed`)."""
        if self.prior is None:
            return torch.zeros(len(replies))
        members = group_indices([s.key() for s in states])
        out = torch.zeros(len(replies))
        heads = self._prior_heads([states[m[0]] for m in members], [prompts[m[0]] for m in members])
        for m, offsets in zip(members, self._prior_packed(heads, [[replies[i] for i in m] for m in members],
                                                          batch_size)):
            out[m] = offsets
        return out

    def _prior_heads(self, states: Sequence[AgentState], heads: Sequence[Sequence[int]]) -> Sequence[Sequence[int]]:
        """The prompt ids the prior reads `states` by: the PRM's own `heads` where both read states alike, else
        its policy's prompt encoded."""
        if self.prior.prompt == self.prompt:
            return heads
        return [prompt_ids(self.tokenizer, s, self.prior.prompt) for s in states]

    @torch.no_grad()
    def _prior_packed(self, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[Sequence[int]]],
                      batch_size: int) -> list[torch.Tensor]:
        """w · log π_ref of every reply of every prompt, a prompt and its replies in one packed row
        (agent/scoring.py `score_candidates`), `batch_size` prompts a call."""
        return [logp.float().cpu() * self.prior.weight for lo in range(0, len(prompts), batch_size)
                for logp in score_candidates(self.prior.policy, prompts[lo:lo + batch_size],
                                             replies[lo:lo + batch_size], self.tokenizer.pad_token_id)]

    def add_lora(self, cfg, seed: int = 0) -> None:
        """Train LoRA adapters on the backbone (models/lora.py) and the new scalar head in full, instead of every
        weight; `save` then writes peft's adapter folder (head included), or merged weights with `merge`."""
        from agentprm.models.lora import add_lora

        self.lm = add_lora(self.lm, cfg, head="score", seed=seed)

    def save(self, folder: str | Path, merge: bool = False, **info: Any) -> Path:
        """Atomically: written to a temp folder next to `folder`, then renamed over it. A model with LoRA adapters
        is saved as its adapter folder, or with `merge` as full weights. Under a data-parallel launch only the main
        process writes (train/distributed.py)."""
        from agentprm.models.lora import save_trained

        if not is_main():
            return Path(folder)

        with atomic_dir(folder) as tmp:
            save_trained(self.lm, tmp, merge, what="PRM")
            self.tokenizer.save_pretrained(tmp)
            if self.prior is not None:
                self.prior.policy.save_pretrained(tmp / PRIOR_DIR)
                self.prior.prompt.save(tmp / PRIOR_DIR)
                info["prior_weight"] = self.prior.weight
            self.prompt.save(tmp, kind=KIND, **info)
        return Path(folder)

    def encode(self, state: AgentState, reply: str) -> list[int]:
        return prompt_ids(self.tokenizer, state, self.prompt) + reply_ids(self.tokenizer, reply)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits f(s, a), shape (batch,), for right-padded sequences."""
        lm = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm   # under LoRA: peft's wrap
        hidden = lm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        last = attention_mask.sum(-1) - 1
        return lm.score(hidden[torch.arange(len(last), device=hidden.device), last]).squeeze(-1).float()

    def logits_of(self, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        device = next(self.parameters()).device
        ids, mask = right_pad(seqs, self.tokenizer.pad_token_id)
        return self(ids.to(device), mask.to(device))

    def logits_packed(self, prompts: Sequence[Sequence[int]],
                      replies: Sequence[Sequence[Sequence[int]]]) -> list[torch.Tensor]:
        """f(s, a) for every reply of every prompt (one tensor (n_replies,) per prompt), with gradients. A prompt and
        all its replies go into one packed row (agent/scoring.py `pack_row`): each reply sees the prompt and its own
        tokens, at the positions it would have after the prompt alone, and is pooled at its last token — the logits
        `logits_of` gives each prompt ⊕ reply, for the prompt's tokens once instead of once per reply (pairs and a
        state's candidates in training, a state's rows in evaluation)."""
        if len(prompts) != len(replies):
            raise ValueError(f"{len(prompts)} prompts but {len(replies)} reply lists")
        lm = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm
        rows = [pack_row(p, r) for p, r in zip(prompts, replies)]
        hidden = packed_hidden(lm.base_model, rows, self.tokenizer.pad_token_id)
        row, at = [], []
        for i, ((*_, starts), tails) in enumerate(zip(rows, replies)):
            for start, tail in zip(starts, tails):
                row.append(i), at.append(start + len(tail) - 1)
        index = torch.tensor(row, device=hidden.device), torch.tensor(at, device=hidden.device)
        logits = lm.score(hidden[index]).squeeze(-1).float()
        return list(torch.split(logits, [len(r) for r in replies]))

    @torch.no_grad()
    def score_packed(self, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[Sequence[int]]],
                     batch_size: int = 32) -> list[torch.Tensor]:
        """Logits f(s, a) (no sigmoid, no prior) of `logits_packed`, without gradients, in forwards of up to
        `batch_size` rows of similar length (rows sorted by length: a forward pays for its longest row). A prompt
        with no replies gets an empty tensor."""
        was_training = self.training
        self.eval()
        out: list[torch.Tensor | None] = [None] * len(prompts)
        for alone in (True, False):   # a prompt with one reply runs as a plain padded row: its 2-D mask is cheaper
            order = sorted((i for i in range(len(prompts)) if (len(replies[i]) == 1) == alone),
                           key=lambda i: len(prompts[i]) + sum(map(len, replies[i])))
            for lo in range(0, len(order), batch_size):
                part = order[lo:lo + batch_size]
                if alone:
                    found = self.logits_of([list(prompts[i]) + list(replies[i][0]) for i in part])[:, None]
                else:
                    found = self.logits_packed([prompts[i] for i in part], [replies[i] for i in part])
                for i, logits in zip(part, found):
                    out[i] = logits.cpu()
        self.train(was_training)
        return out

    def score(self, states: Sequence[AgentState], replies: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Q_φ(s, a) in [0, 1] for every (state, reply); the replies of one state share one packed row
        (`logits_packed`: Best-of-N's N candidates cost one prompt)."""
        return torch.sigmoid(self.logits(states, replies, batch_size))

    def logits(self, states: Sequence[AgentState], replies: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """logit Q_φ(s, a) (the prior's log π included, where there is one): what `score` squashes, kept apart for
        critics that add to it (search/layout.py) — a listwise PRM's logits run far past float32's sigmoid."""
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        members = group_indices([s.key() for s in states])
        heads = [prompt_ids(self.tokenizer, states[m[0]], self.prompt) for m in members]
        tails = [[reply_ids(self.tokenizer, replies[i]) for i in m] for m in members]
        logits = torch.zeros(len(replies))
        found = self.score_packed(heads, tails, batch_size)
        if self.prior is not None:
            heads = self._prior_heads([states[m[0]] for m in members], heads)
            found = [f + o for f, o in zip(found, self._prior_packed(heads, tails, batch_size))]
        for m, group in zip(members, found):
            logits[m] = group
        return logits


def group_indices(keys: Sequence) -> list[list[int]]:
    """The indices of equal keys (a state's rows), groups in order of first appearance."""
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _frozen(model: PreTrainedModel) -> PreTrainedModel:
    model.eval()
    model.requires_grad_(False)
    return model


def _ensure_pad(tokenizer) -> None:
    if tokenizer.pad_token is None:  # many causal-LM checkpoints ship none; pooling uses the mask, so EOS is safe
        tokenizer.pad_token = tokenizer.eos_token


def _load_classifier(folder: Path, pad_token_id: int | None) -> PreTrainedModel:
    """The folder's backbone as a scalar classifier; a LoRA adapter folder (a PRM saved with its adapter, or a
    policy adapter to initialise from) loads its base and merges the adapter in (models/lora.py)."""
    adapter = (folder / ADAPTER_CONFIG).exists()
    if not adapter and not (folder / "config.json").exists():
        raise UserError(f"{folder}: not a model folder (no config.json)")
    with quiet_transformers() if adapter else nullcontext():   # an adapter's base lists the head as "MISSING"
        lm = load_weights(AutoModelForSequenceClassification, folder, num_labels=1)
    lm.config.pad_token_id = pad_token_id
    return place(lm)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
