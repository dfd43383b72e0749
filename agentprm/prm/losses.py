"""PRM losses, by name (docs/algorithms.md §1, §5). A loss is of one of three kinds, each with one signature:

    pointwise   fn(logits (B,), q (B,)) -> loss          one (state, reply) sequence with its soft label Q̂
    pairwise    fn(chosen (B,), rejected (B,)) -> loss   two replies at one state, the first with the higher Q̂
    trajectory  fn(step_logits (T,), first_error) -> loss   one episode's steps, those from `first_error` on wrong
    listwise    fn(logits (K,), q (K,), delta) -> terms (T,)  every reply of one state (packed in one row), a loss
                                                         term per reply that beats another by more than delta;
                                                         the batch's loss is the mean of its states' terms

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


KINDS = ("pointwise", "pairwise", "trajectory", "listwise")


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


@register_prm_loss("plackett-luce", kind="listwise")
def plackett_luce(logits: torch.Tensor, q: torch.Tensor, delta: float = 0.0) -> torch.Tensor:
    """One term per reply i that beats some reply of its state: logsumexp_{j ∈ {i} ∪ B(i)} f_j − f_i, with
    B(i) = {j : Q̂_j < Q̂_i − delta} — "i is chosen out of itself and everything it beats". Without ties these are
    exactly the Plackett-Luce factors of the state's order by Q̂ (the likelihood of the whole ranking, not of its
    pairs one by one); tied replies are never asked to beat each other. With two replies it is Bradley-Terry."""
    beats = q[None, :] < q[:, None] - delta           # beats[i, j]: Q̂_i > Q̂_j + delta
    rows = beats.any(1)
    if not rows.any():
        return logits.new_zeros(0)
    pool = (beats | torch.eye(len(q), dtype=torch.bool, device=q.device))[rows]
    masked = logits[None, :].expand(len(pool), -1).masked_fill(~pool, float("-inf"))
    return torch.logsumexp(masked, -1) - logits[rows]


@register_prm_loss("advantage", kind="listwise")
def advantage(logits: torch.Tensor, q: torch.Tensor, delta: float = 0.0) -> torch.Tensor:
    """One term per reply: (A_φ,i − Â_i)², the critic's advantage at the state fitted to the targets' — A_φ,i =
    σ(f_i) − mean_j σ(f_j), Â_i = Q̂_i − mean_j Q̂_j over the state's replies. Unlike the ranking losses it weighs a
    gap by its size (a 0.9-vs-0 pair counts more than a 0.73-vs-0.72 one, which Bradley-Terry at δ = 0 learns as
    firmly), in Q's own units, so there is no scale to choose; the states' values cancel, as in the ranking losses.
    (`delta` only selects the states, as for every listwise loss: those whose Q̂ spread exceeds it.)"""
    a_critic = torch.sigmoid(logits)
    a_critic = a_critic - a_critic.mean()
    return (a_critic - (q - q.mean())).square()
