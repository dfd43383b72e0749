"""Advantages for group policy gradients (docs/algorithms.md §4): outcome-only GRPO and SPRO's cumulative process
reward with the Masked Step Advantage. Pure functions on small tensors; a group is the G episodes of one task.

Steps are laid out as a (G, T) tensor with a (G, T) 0/1 mask, since episodes of one task end at different turns
(`pad_steps` builds both from ragged lists). Two granularities for SPRO's "step":

  per turn (default)  one step = one agent turn; its log-ratio is log π_θ(reply|s) − log π_ref(reply|s), summed
                      over the reply's tokens. Step t of two episodes is then "the t-th decision", which is what
                      the masked mean compares; it also matches the turn-level MDP every other stage uses.
  per token           one step = one reply token, the episode's reply tokens laid end to end (env observations
                      are not the policy's actions). Closer to SPRO's token-level MDP, but token t of two
                      episodes lands in unrelated commands as soon as reply lengths differ.

SPRO: R_{i,t} = Σ_{j≤t} β·lr_{i,j},  MSA_{i,t} = R_{i,t} − mean{R_{k,t} : mask_{k,t}},
      A_{i,t} = (o_i − mean o)/(std o + eps) + MSA_{i,t}.
With β = 0 every R is exactly 0, so A equals the GRPO advantage broadcast over the episode's steps, bit for bit.
"""
from __future__ import annotations

from typing import Sequence

import torch

STD_EPS = 1e-6


def pad_steps(rows: Sequence[Sequence[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged per-step values → (G, T) float tensor (zeros past each row's end) and its 0/1 mask."""
    width = max((len(r) for r in rows), default=0)
    values, mask = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        values[i, :len(r)] = torch.as_tensor(list(r), dtype=torch.float32)
        mask[i, :len(r)] = 1.0
    return values, mask


def group_outcome_advantages(outcomes: torch.Tensor, eps: float = STD_EPS) -> torch.Tensor:
    """GRPO: (o_i − mean o) / (std o + eps) over one group, shape (G,). Population std, so a group of one or with
    equal outcomes gives exactly 0 (no signal) rather than NaN."""
    o = outcomes.float()
    centred = o - o.mean()
    return centred / (centred.pow(2).mean().sqrt() + eps)


def cumulative_process_rewards(log_ratios: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """R_{i,t} = Σ_{j≤t} β · log(π_θ/π_ref)_{i,j}; detached (SPRO treats the process reward as a constant)."""
    return beta * (log_ratios.detach() * mask).cumsum(-1) * mask


def masked_step_advantages(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """MSA_{i,t} = R_{i,t} − mean of R_{k,t} over the episodes k that have a step t; 0 where row i has none."""
    counts = mask.sum(0).clamp(min=1.0)
    step_mean = (rewards * mask).sum(0) / counts
    return (rewards - step_mean) * mask


def spro_advantages(outcomes: torch.Tensor, log_ratios: torch.Tensor, mask: torch.Tensor, beta: float,
                    eps: float = STD_EPS) -> torch.Tensor:
    """A_{i,t} = GRPO outcome advantage of episode i + MSA_{i,t}, shape (G, T), 0 on padding."""
    outcome = group_outcome_advantages(outcomes, eps)[:, None] * mask
    return outcome + masked_step_advantages(cumulative_process_rewards(log_ratios, mask, beta), mask)


def per_token_layout(turn_token_log_ratios: Sequence[Sequence[Sequence[float]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token granularity: for each episode, its turns' token log-ratios laid end to end → (G, N) and mask."""
    return pad_steps([[x for turn in episode for x in turn] for episode in turn_token_log_ratios])
