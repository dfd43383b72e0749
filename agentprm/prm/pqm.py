"""PQM (Li & Li, arXiv 2410.11287): the PRM as a Q-value *ranking* within a trajectory, instead of per-step BCE.

With C = the steps before the first error (c_1 … c_|C|, in order) and W = the first error and every step after it,
the optimal Q ranks Q_w < Q_{c_1} < Q_{c_2} < … . The comparative loss (the paper's Eq. 10, as we read it), on the
PRM's logits Q = f(s, a) and with a margin ζ pushing wrong steps further down:

    L = −1/|C| Σ_{t=1}^{|C|} log [ exp(Q_{c_t}) / ( Σ_{q≤t} exp(Q_{c_q}) + Σ_{w∈W} exp(Q_w + ζ) ) ]

A successful trajectory has W = ∅ (its correct steps are still ranked in order); a trajectory whose first step is
an error has C = ∅ and gives no term. (The authors' code also prepends a Q = 0 anchor as an extra correct step;
we follow the equation.)

The loss needs a whole trajectory per example: it is the registry's "trajectory" kind (prm/losses.py, name "pqm"),
so `train-prm --loss pqm` and `prm.loss: pqm` train with it, and `prm/train.py` builds the examples here: step
labels come from the MC Q-targets, a step being an error when no rollout through it won (Q̂ ≤ `error_q`).

    trajectories = pqm_trajectories(episodes, q_of, prm.tokenizer, prm.prompt)
    train(prm, trajectories, PQMLoss(zeta=4.0), TrainConfig(...))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch

from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
from agentprm.agent.replay import episode_states
from agentprm.data.trajectories import EpisodeRecord

DEFAULT_ZETA = 4.0   # the authors' released default


def pqm_loss(q: torch.Tensor, first_error: int, zeta: float = DEFAULT_ZETA) -> torch.Tensor:
    """Comparative loss of one trajectory's step logits `q` (T,), steps ≥ `first_error` wrong; 0 when no step is
    correct."""
    correct, wrong = q[:first_error], q[first_error:]
    if len(correct) == 0:
        return q.sum() * 0.0
    wrong_mass = torch.logsumexp(wrong + zeta, 0) if len(wrong) else q.new_tensor(-torch.inf)
    prefix = torch.logcumsumexp(correct, 0)                     # log Σ_{q≤t} exp(Q_{c_q})
    denominator = torch.logaddexp(prefix, wrong_mass.expand_as(prefix))
    return (denominator - correct).mean()


def first_error_index(step_q: Sequence[float], won: bool, error_q: float = 0.0) -> int:
    """len(steps) for a won episode; else the first step with Q̂ ≤ error_q, or the last step when every step
    kept some chance (the failure became certain there)."""
    if won:
        return len(step_q)
    return next((t for t, q in enumerate(step_q) if q <= error_q), len(step_q) - 1)


@dataclass(frozen=True)
class PQMTrajectory:
    seqs: list[list[int]]      # prompt ⊕ reply ids per turn
    first_error: int           # == len(seqs) when no step is wrong


def pqm_trajectories(episodes: Iterable[EpisodeRecord], q_of: Mapping[tuple[str, str], float], tokenizer,
                     prompt_cfg: PromptConfig, error_q: float = 0.0) -> list[PQMTrajectory]:
    """One example per episode with steps, labelled from Q-targets keyed by (state_key, reply) (targets/mc.py);
    an episode with a step the targets do not cover is left out."""
    out = []
    for episode in episodes:
        if episode.error or not episode.steps:
            continue
        pairs = list(episode_states(episode))
        if any((state.key(), reply) not in q_of for state, reply in pairs):
            continue
        step_q = [q_of[(state.key(), reply)] for state, reply in pairs]
        seqs = [prompt_ids(tokenizer, s, prompt_cfg) + reply_ids(tokenizer, r) for s, r in pairs]
        out.append(PQMTrajectory(seqs, first_error_index(step_q, episode.won, error_q)))
    return out


class PQMLoss:
    """`loss_fn(prm, trajectories)` for the training core: mean comparative loss over the batch's trajectories
    (`fn` = any registered trajectory loss; default PQM's with margin `zeta`)."""

    def __init__(self, zeta: float = DEFAULT_ZETA, fn=None):
        self.fn = fn or (lambda q, first_error: pqm_loss(q, first_error, zeta))

    def __call__(self, model, batch: Sequence[PQMTrajectory]) -> tuple[torch.Tensor, dict]:
        logits = model.logits_of([s for traj in batch for s in traj.seqs])
        per_traj = torch.split(logits, [len(traj.seqs) for traj in batch])
        losses = torch.stack([self.fn(q, traj.first_error) for q, traj in zip(per_traj, batch)])
        ranked = [bool(q[:t].min() > q[t:].max()) for q, traj in zip(per_traj, batch)
                  if 0 < (t := traj.first_error) < len(q)]
        return losses.mean(), {"ranked_frac": sum(ranked) / len(ranked) if ranked else 0.0}
