"""PRM losses, by name. A loss is pointwise (one (state, reply) sequence with its soft label Q̂) or pairwise (a
chosen and a rejected reply at the same state); `agentprm.prm.train` builds the matching examples and plugs the
loss into the shared training core. New losses (PQM, InversePRM) register the same way:

    @register_prm_loss("my-loss", pairwise=False)
    def my_loss(logits: Tensor, q: Tensor) -> Tensor: ...
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from agentprm.errors import UserError


@dataclass(frozen=True)
class PrmLoss:
    name: str
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    pairwise: bool  # fn(chosen_logits, rejected_logits); else fn(logits, q_targets)


PRM_LOSSES: dict[str, PrmLoss] = {}


def register_prm_loss(name: str, pairwise: bool = False):
    def add(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        PRM_LOSSES[name] = PrmLoss(name, fn, pairwise)
        return fn
    return add


def get_prm_loss(name: str) -> PrmLoss:
    if name not in PRM_LOSSES:
        raise UserError(f"unknown PRM loss {name!r}; known: {', '.join(PRM_LOSSES)}")
    return PRM_LOSSES[name]


@register_prm_loss("soft-bce")
def soft_bce(logits: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """−[Q̂ log σ(f) + (1 − Q̂) log(1 − σ(f))], mean over the batch; Q̂ is a soft label in [0, 1]."""
    return F.binary_cross_entropy_with_logits(logits, q)


@register_prm_loss("bradley-terry", pairwise=True)
def bradley_terry(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """−log σ(f(s, a⁺) − f(s, a⁻)), mean over pairs (softplus form: stable for large logit gaps)."""
    return F.softplus(rejected - chosen).mean()
