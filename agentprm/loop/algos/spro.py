"""SPRO (arXiv 2507.01551) as a loop algorithm: GRPO's recipe with the Masked Step Advantage of the cumulative
process reward β Σ log(π_θ/π_ref) added per turn, β = `policy_gradient.spro_beta` (explicit: the paper leaves it
unreported), π_ref the frozen initial policy π0 as in its paper (`policy_gradient.spro_reference: previous` makes it
π_{i-1}, whose process reward is 0 at each iteration's first step). spro_beta: 0 reproduces grpo exactly."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import IterationContext, IterationResult, register_algorithm
from agentprm.loop.algos.grpo import check, policy_gradient_iteration


@register_algorithm("spro", check=check, uses=("policy_gradient.spro_reference",))
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    return policy_gradient_iteration(ctx, prev, "spro")
