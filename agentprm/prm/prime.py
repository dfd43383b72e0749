"""PRIME's implicit PRM (Cui et al., arXiv 2502.01456; docs/algorithms.md §5), at turn granularity.

A causal LM π_φ, initialised from a policy and compared against a frozen reference π_ref (that same policy),
defines a reward per turn without any step label:

    r_φ(s_t, a_t) = β · ( log π_φ(a_t | s_t) − log π_ref(a_t | s_t) )     (a_t = the whole reply, tokens summed)

and is trained from episode outcomes o ∈ {0, 1} alone, with cross-entropy on σ(Σ_t r_φ(s_t, a_t)):

    L(φ) = − E_episodes [ o log σ(Σ_t r_t) + (1 − o) log(1 − σ(Σ_t r_t)) ]

Σ_{j≤t} r_j is the implicit Q of turn t; at one state the prefix Σ_{j<t} r_j is shared by every candidate, so
ranking candidates by r_t ranks them by Q. `score(states, replies)` returns σ(r_t): the same interface and order
as `ProcessRewardModel.score`, so `BestOfNAgent` (and beam search) can use it, but not a calibrated probability.

    prm = ImplicitPRM.from_policy("runs/x/policy_0", beta=0.05)
    train_prime(prm, episodes, TrainConfig(epochs=2))
    prm.save("runs/x/prime"); ImplicitPRM.load("runs/x/prime")

The saved folder is a policy folder (π_φ) whose agentprm.json records β and the reference folder's path (not a
copy: the reference is the policy it was initialised from, kept by the run).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.checkpoint import save_policy
from agentprm.agent.encoding import CONFIG_FILE, PromptConfig, prompt_ids, reply_ids
from agentprm.agent.episodes import EncodedEpisode, add_reference_logprobs, encode_episode
from agentprm.agent.scoring import reply_logprobs, score_candidates
from agentprm.agent.state import AgentState
from agentprm.data.trajectories import EpisodeRecord
from agentprm.errors import UserError
from agentprm.models import load_causal_lm, load_tokenizer
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

KEY = "implicit_prm"


def prime_loss(turn_rewards: Sequence[torch.Tensor], outcomes: torch.Tensor) -> torch.Tensor:
    """Mean over episodes of BCE(σ(Σ_t r_t), o); `turn_rewards` holds one (T_i,) tensor per episode."""
    logits = torch.stack([r.sum() for r in turn_rewards])
    return F.binary_cross_entropy_with_logits(logits, outcomes.to(logits.dtype))


class ImplicitPRM:
    def __init__(self, model, reference, tokenizer, prompt_cfg: PromptConfig, beta: float,
                 reference_dir: str | Path = ""):
        self.model, self.reference = model, reference.eval().requires_grad_(False)
        self.tokenizer, self.prompt, self.beta, self.reference_dir = tokenizer, prompt_cfg, beta, str(reference_dir)

    @classmethod
    def from_policy(cls, folder: str | Path, beta: float) -> ImplicitPRM:
        """π_φ and π_ref both start as the policy in `folder`, so every reward starts at exactly 0."""
        model = load_causal_lm(folder)
        return cls(model, copy.deepcopy(model), load_tokenizer(folder), PromptConfig.load(folder), beta,
                   Path(folder).resolve())

    @classmethod
    def load(cls, folder: str | Path) -> ImplicitPRM:
        meta = json.loads((Path(folder) / CONFIG_FILE).read_text()).get(KEY)
        if not meta:
            raise UserError(f"{folder}: not an implicit PRM folder (no '{KEY}' in {CONFIG_FILE})")
        return cls(load_causal_lm(folder), load_causal_lm(meta["reference"]), load_tokenizer(folder),
                   PromptConfig.load(folder), meta["beta"], meta["reference"])

    def save(self, folder: str | Path) -> Path:
        return save_policy(self.model, self.tokenizer, folder, self.prompt,
                           **{KEY: {"beta": self.beta, "reference": self.reference_dir}})

    def turn_rewards(self, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]],
                     ref_logps: torch.Tensor) -> torch.Tensor:
        """β (log π_φ − log π_ref) per (prompt, reply), with gradients through φ."""
        logps = reply_logprobs(self.model, prompts, replies, self.tokenizer.pad_token_id).cpu()
        return self.beta * (logps - ref_logps)

    @torch.no_grad()
    def score(self, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor:
        """σ(r_φ(s, a)) per (state, reply), shape (N,); states shared by several replies are encoded once."""
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        order: dict[str, int] = {}
        prompts, candidates, where = [], [], []
        for state, reply in zip(states, replies):
            if state.key() not in order:
                order[state.key()] = len(prompts)
                prompts.append(prompt_ids(self.tokenizer, state, self.prompt))
                candidates.append([])
            row = order[state.key()]
            where.append((row, len(candidates[row])))
            candidates[row].append(reply_ids(self.tokenizer, reply))
        pad = self.tokenizer.pad_token_id
        phi = score_candidates(self.model.eval(), prompts, candidates, pad)
        ref = score_candidates(self.reference, prompts, candidates, pad)
        return torch.stack([torch.sigmoid(self.beta * (phi[i][j] - ref[i][j])) for i, j in where])


class PrimeLoss:
    """`loss_fn(model, episodes)` for the training core (`model` is `prm.model`)."""

    def __init__(self, prm: ImplicitPRM):
        self.prm = prm

    def __call__(self, model, batch: Sequence[EncodedEpisode]) -> tuple[torch.Tensor, dict]:
        prompts, replies = [p for ep in batch for p in ep.prompts], [r for ep in batch for r in ep.replies]
        rewards = self.prm.turn_rewards(prompts, replies, torch.cat([ep.ref_logps for ep in batch]))
        per_episode = torch.split(rewards, [len(ep.prompts) for ep in batch])
        outcomes = torch.tensor([ep.outcome for ep in batch])
        predicted = torch.stack([r.sum() for r in per_episode]).detach() > 0
        return prime_loss(per_episode, outcomes), {"outcome_acc": float((predicted == outcomes.bool()).float().mean())}


def train_prime(prm: ImplicitPRM, episodes: Iterable[EpisodeRecord], cfg: TrainConfig, progress: bool = False,
                on_log=None) -> list[dict]:
    """Fit π_φ to the episodes' outcomes (failed-env and empty episodes skipped); π_ref stays frozen."""
    examples = [encode_episode(e, prm.tokenizer, prm.prompt) for e in episodes if e.steps and not e.error]
    if not examples:
        raise UserError("no usable episodes to train the implicit PRM on")
    add_reference_logprobs(examples, prm.reference, prm.tokenizer.pad_token_id)
    return train(prm.model, examples, PrimeLoss(prm), cfg, description="prime", progress=progress, on_log=on_log)
