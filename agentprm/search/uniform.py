"""The critic that knows nothing: seeded uniform scores with the PRM's `score(states, replies)` signature. Put in
place of Q_i (beam search, Best-of-N, the policy update's `policy.critic: uniform`), it is the control that says
how much of a search's or an update's gain comes from what the PRM knows rather than from sampling more.

A score is a hash of (seed, the state's key, the reply) mapped to [0, 1): uniform over pairs, the same for the
same pair whenever it is asked, and independent of call order — so episodes scored concurrently (search/beam.py
lanes) get what they would get one by one.
"""
from __future__ import annotations

import hashlib

import torch

_SCALE = 2.0 ** -64


def hash64(*parts) -> int:
    """A 64-bit integer fixed by `parts` alone (blake2b of their text): the uniform critic's scores and each beam
    episode's sampling seed (search/beam.py), the same in every process and whatever the call order."""
    text = "\0".join(map(str, parts))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class UniformCritic:
    name = "uniform"

    def __init__(self, seed: int):
        self.seed = seed

    def score(self, states, replies) -> torch.Tensor:
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        return torch.tensor([hash64(self.seed, s.key(), r) * _SCALE for s, r in zip(states, replies)],
                            dtype=torch.float32)
