"""PRIME's implicit PRM (arXiv 2502.01456) in the AgentPRM loop, one iteration: rollouts of π_{i-1} → implicit PRM
r = β log(π_φ/π_ref) fitted to the episodes' outcomes only (no Q-targets) → online DPO π_i vs π_{i-1} against it →
the loop evaluates π_i and BoN(π_i, implicit PRM). PRIME itself feeds its rewards to RLOO/PPO; using the same stage 3 as AgentPRM
keeps the comparison about the PRM alone."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import POLICY_UPDATE_FIELDS, IterationContext, IterationResult, register_algorithm
from agentprm.loop.policy_stage import PolicyStage, update_policy


@register_algorithm("prime", uses=POLICY_UPDATE_FIELDS)
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.prm.prime import ImplicitPRM, train_prime

    c, it = ctx.cfg.prime, f"iter_{ctx.i}"
    rollouts = ctx.rollouts(prev)

    def fit(out: Path) -> None:
        prm = ImplicitPRM.from_policy(prev, beta=c.beta)
        train_prime(prm, iter_episodes(read_trajectories(rollouts)), c.train_config(ctx.seed),
                    progress=ctx.progress)
        prm.save(out)

    prm = ctx.stages.run(f"{it}/prm", f"{it}/prm", fit)
    policy = ctx.stages.run(f"{it}/policy", f"{it}/policy", lambda out: update_policy(
        PolicyStage.of(ctx.cfg), ctx.stages, ctx.i, prev, prm, rollouts, ctx.tasks, out, ctx.progress))
    return IterationResult(policy, prm)
