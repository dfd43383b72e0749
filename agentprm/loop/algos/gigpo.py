"""GiGPO (arXiv 2505.10978, verl-agent) as a loop algorithm: GRPO's recipe with step-level credit from anchor
states — the steps of a task's group that stand in the same state compare their discounted returns
(policy/advantages.py `gigpo_advantages`; ω, γ and the normalisation in the `policy_gradient` section). No critic is
trained: it is the critic-free step credit a learned PRM must beat at equal rollouts (docs/results.md)."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import IterationContext, IterationResult, register_algorithm
from agentprm.loop.algos.grpo import check, policy_gradient_iteration


@register_algorithm("gigpo", check=check)
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    return policy_gradient_iteration(ctx, prev, "gigpo")
