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


class UniformCritic:
    name = "uniform"

    def __init__(self, seed: int):
        self.seed = seed

    def score(self, states, replies) -> torch.Tensor:
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        return torch.tensor([self._uniform(s.key(), r) for s, r in zip(states, replies)], dtype=torch.float32)

    def _uniform(self, state_key: str, reply: str) -> float:
        digest = hashlib.blake2b(f"{self.seed}\0{state_key}\0{reply}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") * _SCALE
