"""SPRO (arXiv 2507.01551) as a loop algorithm: GRPO's iteration with the Masked Step Advantage of the cumulative
process reward β Σ log(π_θ/π_ref) added per turn, β = `policy_gradient.spro_beta` (explicit: the paper leaves it
unreported). spro_beta: 0 reproduces grpo exactly."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import register_algorithm
from agentprm.loop.algos.grpo import policy_gradient_iteration


@register_algorithm("spro")
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    return policy_gradient_iteration(loop, i, prev, train_tasks, eval_tasks,
                                     process_beta=loop.cfg.policy_gradient.spro_beta)
