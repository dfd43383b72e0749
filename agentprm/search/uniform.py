"""The critic that knows nothing: seeded uniform scores with the PRM's `score(states, replies)` signature. Put in
place of Q_i (beam search, Best-of-N, the policy update's `policy.critic: uniform`), it is the control that says
how much of a search's or an update's gain comes from what the PRM knows rather than from sampling more."""
from __future__ import annotations

import torch


class UniformCritic:
    name = "uniform"

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def score(self, states, replies) -> torch.Tensor:
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        return torch.rand(len(replies), generator=self.generator)
