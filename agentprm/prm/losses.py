"""PRM losses, by name (docs/algorithms.md §1, §5). A loss is of one of three kinds, each with one signature:

    pointwise   fn(logits (B,), q (B,)) -> loss          one (state, reply) sequence with its soft label Q̂
    pairwise    fn(chosen (B,), rejected (B,)) -> loss   two replies at one state, the first with the higher Q̂
    trajectory  fn(step_logits (T,), first_error) -> loss   one episode's steps, those from `first_error` on wrong

`agentprm.prm.train` builds the matching examples from a Q-targets file and plugs the loss into the shared
training core; `train-prm --loss NAME` and the loop's `prm.loss` accept every registered name:

    @register_prm_loss("my-loss", kind="pointwise")
    def my_loss(logits: Tensor, q: Tensor) -> Tensor: ...
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from agentprm.prm.pqm import pqm_loss
from agentprm.registry import Registry


KINDS = ("pointwise", "pairwise", "trajectory")


@dataclass(frozen=True)
class PrmLoss:
    name: str
    fn: Callable[[torch.Tensor, Any], torch.Tensor]
    kind: str = "pointwise"

    @property
    def pairwise(self) -> bool:
        return self.kind == "pairwise"


PRM_LOSSES: Registry[PrmLoss] = Registry("PRM loss")


def register_prm_loss(name: str, kind: str = "pointwise"):
    """Decorator adding `fn` under `name`; a name already taken is refused (a loss is never silently replaced)."""
    if kind not in KINDS:
        raise ValueError(f"PRM loss {name!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")

    def add(fn: Callable[[torch.Tensor, Any], torch.Tensor]):
        PRM_LOSSES.add(name, PrmLoss(name, fn, kind))
        return fn
    return add


def get_prm_loss(name: str) -> PrmLoss:
    return PRM_LOSSES.entry(name)


@register_prm_loss("soft-bce")
def soft_bce(logits: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """−[Q̂ log σ(f) + (1 − Q̂) log(1 − σ(f))], mean over the batch; Q̂ is a soft label in [0, 1]."""
    return F.binary_cross_entropy_with_logits(logits, q)


@register_prm_loss("bradley-terry", kind="pairwise")
def bradley_terry(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """−log σ(f(s, a⁺) − f(s, a⁻)), mean over pairs (softplus form: stable for large logit gaps)."""
    return F.softplus(rejected - chosen).mean()


register_prm_loss("pqm", kind="trajectory")(pqm_loss)   # PQM's comparative ranking loss (prm/pqm.py), ζ = 4
