"""GiGPO (arXiv 2505.10978, verl-agent) as a loop algorithm: GRPO's iteration with step-level credit from anchor
states — the steps of a task's group that stand in the same state compare their discounted returns
(policy/advantages.py `gigpo_advantages`; ω, γ and the normalisation in the `policy_gradient` section). No critic is
trained: it is the critic-free step credit a learned PRM must beat at equal rollouts (docs/results.md)."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import register_algorithm
from agentprm.loop.algos.grpo import policy_gradient_iteration


@register_algorithm("gigpo")
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    return policy_gradient_iteration(loop, i, prev, train_tasks, eval_tasks, process_beta=0.0, gigpo=True)
