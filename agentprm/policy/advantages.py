"""Advantages for group policy gradients (docs/algorithms.md §4): outcome-only GRPO, SPRO's cumulative process
reward with the Masked Step Advantage, and GiGPO's anchor-state step advantage. Pure functions on small tensors; a
group is the G episodes of one task.

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

GiGPO (arXiv 2505.10978): the steps of a group's episodes that stand in the same environment state s̃ form an anchor
group G(s̃) = {(i, t) : s_t^(i) = s̃}, whatever turn or history led there; each step's discounted return
R_t^(i) = Σ_{k≥t} γ^(k−t) r_k^(i) is compared with its anchor group's:

      A^S_{i,t} = (R_t^(i) − mean_{(j,u)∈G(s̃)} R_u^(j)) / F_norm,    A_{i,t} = A^E_i + ω · A^S_{i,t},

A^E the GRPO episode advantage, F_norm the group's std (or 1 without std normalisation), A^S = 0 for a step whose
state no other step of the group reached. No model is fitted and no extra rollout is played: the credit comes from
states the group's episodes happened to share.

RLOO (leave-one-out): A_i = o_i − mean_{j≠i} o_j, the episode's outcome against the others' mean, not scaled.

Each estimator is registered under its name (`register_advantage`, as verl's `register_adv_est`) with one signature,
`estimator(group: GroupSteps, cfg) -> (G, T) tensor`, cfg the `policy_gradient` section: algo grpo runs the one
`policy_gradient.advantage` names (algos spro and gigpo are grpo with theirs), and an estimator of one's own is a
decorated function in a file imported before the config loads.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Hashable, Sequence

import torch

from agentprm.registry import Registry

if TYPE_CHECKING:
    from agentprm.policy.config import PolicyGradientConfig

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
    return _normalised(outcomes.float(), True, eps)


def _normalised(values: torch.Tensor, std_norm: bool, eps: float) -> torch.Tensor:
    centred = values - values.mean()
    return centred / (centred.pow(2).mean().sqrt() + eps) if std_norm else centred


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


def anchor_step_advantages(returns: torch.Tensor, mask: torch.Tensor, anchors: Sequence[Sequence[Hashable]],
                           std_norm: bool = True, eps: float = STD_EPS) -> torch.Tensor:
    """GiGPO's A^S, shape (G, T): each step's return normalised within the steps of the group that share its anchor
    state (`anchors[i][t]`, one key per real step of episode i); 0 for a state reached once, and on padding."""
    members: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    for i, keys in enumerate(anchors):
        for t, key in enumerate(keys):
            members[key].append((i, t))
    step = torch.zeros_like(returns)
    for group in members.values():
        if len(group) >= 2:
            rows, cols = torch.tensor(group).T
            step[rows, cols] = _normalised(returns[rows, cols], std_norm, eps)
    return step * mask


def gigpo_advantages(outcomes: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                     anchors: Sequence[Sequence[Hashable]], omega: float = 1.0, std_norm: bool = True,
                     eps: float = STD_EPS) -> torch.Tensor:
    """A_{i,t} = A^E_i + ω · A^S_{i,t}, shape (G, T), 0 on padding (A^E normalised like A^S: std or mean only)."""
    episode = _normalised(outcomes.float(), std_norm, eps)[:, None] * mask
    return episode + omega * anchor_step_advantages(returns, mask, anchors, std_norm, eps)



def rloo_advantages(outcomes: torch.Tensor) -> torch.Tensor:
    """A_i = o_i − mean_{j≠i} o_j, shape (G,); a group of one gets 0."""
    o, g = outcomes.float(), outcomes.numel()
    if g < 2:
        return torch.zeros_like(o)
    return o - (o.sum() - o) / (g - 1)


@dataclass
class GroupSteps:
    """One group (the G episodes of a task) as an advantage estimator sees it, turns laid out (G, T) with `mask`:
    `outcomes` (G,) 1.0 won / 0.0; `rewards` the env's per-turn rewards; `anchors[i][t]` the state key of episode i's
    turn t (GiGPO's anchor); `log_ratios` log π_θ − log π_ref per turn, detached — recomputed every optimiser step
    for an estimator registered with `uses_reference` (SPRO), zeros for the others."""
    outcomes: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor
    anchors: Sequence[Sequence[Hashable]]
    log_ratios: torch.Tensor


@dataclass(frozen=True)
class AdvantageEstimator:
    name: str
    fn: Callable[[GroupSteps, "PolicyGradientConfig"], torch.Tensor]
    uses_reference: bool = False   # reads log_ratios, so π_θ's log-probs against π_ref enter every step


ADVANTAGES: Registry[AdvantageEstimator] = Registry("advantage estimator")


def register_advantage(name: str, uses_reference: bool = False):
    """Decorator adding `fn(group: GroupSteps, cfg) -> (G, T) advantages` under `name`; a taken name is refused."""
    def add(fn: Callable) -> Callable:
        ADVANTAGES.add(name, AdvantageEstimator(name, fn, uses_reference))
        return fn
    return add


@register_advantage("grpo")
def _grpo(g: GroupSteps, cfg) -> torch.Tensor:
    return group_outcome_advantages(g.outcomes)[:, None] * g.mask


@register_advantage("rloo")
def _rloo(g: GroupSteps, cfg) -> torch.Tensor:
    return rloo_advantages(g.outcomes)[:, None] * g.mask


@register_advantage("spro", uses_reference=True)
def _spro(g: GroupSteps, cfg) -> torch.Tensor:
    return spro_advantages(g.outcomes, g.log_ratios, g.mask, cfg.spro_beta)


@register_advantage("gigpo")
def _gigpo(g: GroupSteps, cfg) -> torch.Tensor:
    from agentprm.targets.mc import returns_to_go

    lengths = g.mask.sum(1).long().tolist()   # discounted returns-to-go of each episode's turns, γ = gigpo_gamma
    returns, _ = pad_steps([returns_to_go(r[:n].tolist(), cfg.gigpo_gamma).tolist() for r, n in zip(g.rewards, lengths)])
    return gigpo_advantages(g.outcomes, returns, g.mask, g.anchors, cfg.gigpo_omega, cfg.gigpo_std_norm)
