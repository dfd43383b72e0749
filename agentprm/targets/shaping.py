"""Process reward shaping (arXiv 2502.10325 §5, docs/algorithms.md §3): mix π's MC Q-targets with the advantage of a
reference policy μ (e.g. the expert, or π0), which is informative even when π's own rollouts are few:

    A^μ(s,a) = r + γ V^μ(s′) − V^μ(s)          (V^μ(s′) = 0 when the episode ended at this step)
    Q̃(s,a)  = (1 − α) Q̂^π(s,a) + α (A^μ(s,a) + 1) / 2          (paper: α = 0.5)

With ALFWorld rewards (r ∈ {0, 1}, r = 1 only on the last step) and V^μ ∈ [0, 1], A^μ ∈ [−1, 1], so (A + 1)/2 is an
exact, data-independent map onto [0, 1] (clipped for safety); Q̃ stays a soft label for the soft-BCE PRM loss. (The
paper's code passes A through a sigmoid scaled by the batch's inter-quartile range instead: data-dependent, so the
same (s, a) gets a different target in another batch.) A truncated episode's last step counts as terminal, as it
does for the MC returns (nothing is earned after it).

V^μ is a `ProcessRewardModel` scored on (state, empty reply): ALFWorld states are whole histories, so the learner's
states are mostly unseen by μ and a per-state table would know nothing there; a network over the same prompt the
PRM reads generalises across them (`agentprm.prm.value`: fitted with soft-BCE to V̂^μ(s), the visit-weighted mean of
μ's MC Q-targets at s); here it is any function of a batch of states.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import torch

from agentprm.agent.replay import episode_states
from agentprm.agent.state import AgentState
from agentprm.data.tables import TableFile
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.targets.mc import load_states

ValueFn = Callable[[Sequence[AgentState]], torch.Tensor]   # V^μ(s) for a batch of states


def advantage(r: np.ndarray, v: np.ndarray, v_next: np.ndarray, terminal: np.ndarray, gamma: float) -> np.ndarray:
    """A^μ = r + γ V^μ(s′) − V^μ(s), with V^μ(s′) = 0 where `terminal`."""
    return r + gamma * np.where(terminal, 0.0, v_next) - v


def shaped_q(q: np.ndarray, adv: np.ndarray, alpha: float) -> np.ndarray:
    """(1 − α) Q̂ + α (A + 1) / 2, A clipped to [−1, 1]."""
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"shaping alpha {alpha}: must be in [0, 1]")
    return (1 - alpha) * q + alpha * (np.clip(adv, -1.0, 1.0) + 1) / 2


def shape_targets(targets: TableFile, value: ValueFn, alpha: float, gamma: float,
                  rollouts: str | Path | None = None) -> TableFile:
    """The targets with q replaced by Q̃ (same schema, so `train_prm` reads them unchanged); r and s′ of each row
    come from its (episode_id, turn) reference in the rollouts. `info` gains "shaping" (α, γ, the map)."""
    rollouts = rollouts or targets.info.get("rollouts")
    if not rollouts:
        raise UserError(f"{targets.path}: no 'rollouts' path in its metadata; pass the rollouts explicitly")
    states = load_states(targets, rollouts)
    refs = list(zip(targets.table["episode_id"].to_pylist(), targets.table["turn"].to_pylist()))
    nexts = next_steps(rollouts, set(refs))
    r = np.array([nexts[ref][0] for ref in refs], dtype=np.float64)
    terminal = np.array([nexts[ref][1] is None for ref in refs])
    v = value(states).double().numpy()
    following = [nexts[ref][1] for ref in refs if nexts[ref][1] is not None]
    v_next = np.zeros(len(refs))
    v_next[~terminal] = value(following).double().numpy() if following else []
    adv = advantage(r, v, v_next, terminal, gamma)
    q_mc = targets.table["q"].to_numpy()
    table = targets.table.set_column(targets.table.column_names.index("q"), "q",
                                     pa.array(shaped_q(q_mc, adv, alpha), pa.float64()))
    info = {**targets.info, "shaping": {"alpha": alpha, "gamma": gamma, "map": "(clip(A, -1, 1) + 1) / 2",
                                        "mean_advantage": float(adv.mean()) if len(adv) else None}}
    return TableFile(table, info, targets.path)


def next_steps(rollouts: str | Path,
               refs: set[tuple[str, int]]) -> dict[tuple[str, int], tuple[float, AgentState | None]]:
    """(r, s′) for each (episode_id, turn) in `refs`; s′ is None when the episode ended at that step."""
    out = {}
    for episode in iter_episodes(read_trajectories(rollouts)):
        pairs = list(episode_states(episode))
        for t, step in enumerate(episode.steps):
            if (episode.episode_id, t) in refs:
                out[(episode.episode_id, t)] = (step.reward, pairs[t + 1][0] if t + 1 < len(pairs) else None)
    return out
