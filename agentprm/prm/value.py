"""The value model V^μ of process reward shaping (targets/shaping.py): a `ProcessRewardModel` scored on
(state, empty reply), fitted with soft-BCE to V̂^μ(s), the visit-weighted mean of μ's MC Q-targets at s. ALFWorld
states are whole histories, so the learner's states are mostly unseen by μ and a per-state table would know nothing
there; a network over the same prompt the PRM reads generalises across them."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from agentprm.agent.state import AgentState
from agentprm.prm.losses import get_prm_loss
from agentprm.prm.model import ProcessRewardModel
from agentprm.prm.train import make_loss_fn
from agentprm.targets.mc import load_states, targets_from_rollouts
from agentprm.targets.shaping import ValueFn
from agentprm.train.config import TrainConfig
from agentprm.train.core import train


def value_targets(rollouts: str | Path, gamma: float) -> tuple[list[AgentState], list[float]]:
    """V̂^μ(s) for every distinct state in μ's rollouts: Σ_a visits·Q̂(s,a) / Σ_a visits."""
    targets = targets_from_rollouts(rollouts, gamma)
    states = load_states(targets)
    total: dict[str, float] = defaultdict(float)
    visits: dict[str, int] = defaultdict(int)
    first: dict[str, AgentState] = {}
    for state, q, n in zip(states, targets.table["q"].to_pylist(), targets.table["visits"].to_pylist()):
        total[state.key()] += q * n
        visits[state.key()] += n
        first.setdefault(state.key(), state)
    return list(first.values()), [total[k] / visits[k] for k in first]


def fit_value_model(states: Sequence[AgentState], values: Sequence[float], init: str | Path,
                    cfg: TrainConfig, progress: bool = False) -> ProcessRewardModel:
    """A PRM-architecture model fitted with soft-BCE to V̂ on (state, "") sequences."""
    model = ProcessRewardModel.init(init, seed=cfg.seed)
    examples = [(model.encode(s, ""), v, 0.0) for s, v in zip(states, values)]   # (seq, target, no prior offset)
    train(model, examples, make_loss_fn(get_prm_loss("soft-bce")), cfg, description="V^mu", progress=progress,
          length=lambda e: len(e[0]))
    return model


def model_values(model: ProcessRewardModel) -> ValueFn:
    return lambda states: model.score(states, [""] * len(states))
