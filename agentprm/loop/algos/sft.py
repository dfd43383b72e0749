"""Behaviour cloning on the demos, one iteration — the demo-only control for InversePRM: π_i = π_{i-1} fine-tuned
by SFT on the same expert demos InversePRM learns its PRM from (`inverse_prm.demos`, else the run's demos),
`policy0.sft.epochs` passes (CONTROL_EPOCHS when that section counts steps) at `policy.lr` (the online-DPO update's
rate), without renumbered copies; the loop evaluates π_i. No rollouts, no PRM."""
from __future__ import annotations

from pathlib import Path

from agentprm.agent.encoding import PromptConfig
from agentprm.loop.algos.registry import IterationContext, IterationResult, register_algorithm
from agentprm.loop.algos.inverse_prm import demos_path

CONTROL_EPOCHS = 3.0   # a few passes over the few demos of the run's train tasks (the method comparison's setting)


@register_algorithm("sft")
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    from agentprm.policy.sft import SFTConfig, train_sft

    c, i = ctx.cfg, ctx.i
    demos = demos_path(ctx)
    cfg = SFTConfig(model=str(prev), lr=c.policy.lr, epochs=c.policy0.sft.epochs or CONTROL_EPOCHS, renumber_copies=0,
                    prompt=PromptConfig.load(prev), val_frac=0.0)   # the control trains on every demo game
    policy = ctx.stages.run(f"iter_{i}/policy", f"iter_{i}/policy",
                            lambda out: train_sft(demos, out, cfg, seed=ctx.seed, progress=ctx.progress))
    return IterationResult(policy)
