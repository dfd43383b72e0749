"""AgentPRM (arXiv 2502.10325, Alg. 1), one iteration:
rollouts of π_{i-1} → MC Q-targets (γ from t) → PRM Q_i → online DPO π_i vs π_{i-1}; the loop evaluates (π_i, Q_i)."""
from __future__ import annotations

from pathlib import Path

from agentprm.errors import UserError
from agentprm.loop.algos.registry import POLICY_UPDATE_FIELDS, IterationContext, IterationResult, register_algorithm
from agentprm.loop.policy_stage import PolicyStage, update_policy


def value_model(ctx: IterationContext) -> Path:
    """V^μ for reward shaping (`targets.shaping_alpha` > 0), μ = π0: fitted once to π0's MC returns from its
    iteration-1 rollouts, initialised from π0 with the PRM's settings (prm/value.py)."""
    from agentprm.prm.value import fit_value_model, value_targets

    c, policy0 = ctx.cfg, ctx.policy0()
    rollouts = ctx.rollouts_of(1, policy0, ctx.batch_of(1))

    def build(out: Path) -> None:
        states, values = value_targets(rollouts, c.targets.gamma)
        fit_value_model(states, values, policy0, c.prm.train_config(c.seed), progress=ctx.progress).save(out)

    return ctx.stages.run("shaping/value", "shaping/value", build)


def check(cfg, where) -> None:
    if cfg.targets.source == "continuation" and cfg.targets.shaping_alpha:
        raise UserError(f"{where('targets.source')} continuation takes no shaping: set targets.shaping_alpha to 0")
    if cfg.policy.critic == "oracle" and cfg.hacking.enabled:
        raise UserError(f"{where('policy.critic')} oracle has no PRM for the hacking detector to watch: disable it")


@register_algorithm("agentprm", check=check, uses=(*POLICY_UPDATE_FIELDS, "targets.shaping_alpha", "targets.source",
                                                    "rollout.branches", "policy.critic=oracle"))
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    from agentprm.data.tables import write_with_info
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.prm.train import train_prm
    from agentprm.prm.value import model_values
    from agentprm.targets.mc import targets_from_rollouts
    from agentprm.targets.shaping import shape_targets

    c, seed, it = ctx.cfg, ctx.seed, f"iter_{ctx.i}"
    rollouts = ctx.rollouts(prev)

    def targets(out: Path) -> None:
        if c.targets.source == "continuation":
            from agentprm.targets.continuation import continuation_targets

            t = continuation_targets(rollouts, ctx.tasks, prev, gamma=c.targets.gamma, max_steps=c.rollout.max_steps,
                                     states=c.targets.continuation_states,
                                     candidates=c.targets.continuation_candidates, seed=seed, mode=c.rollout.mode,
                                     num_envs=c.rollout.num_envs, workers=c.rollout.workers)
            write_with_info(out, t.table, t.info)
            return
        t = targets_from_rollouts(rollouts, c.targets.gamma)
        if c.targets.shaping_alpha > 0:
            t = shape_targets(t, model_values(ProcessRewardModel.load(value_model(ctx))),
                              c.targets.shaping_alpha, c.targets.gamma, rollouts)
        write_with_info(out, t.table, t.info)

    targets_path = ctx.stages.run(f"{it}/targets", f"{it}/targets.parquet", targets)
    init = prev if c.prm.init == "policy" else c.prm.init
    prm = ctx.stages.run(f"{it}/prm", f"{it}/prm", lambda out: train_prm(
        targets_path, init, c.prm.loss, out, c.prm.train_config(seed), progress=ctx.progress, **c.prm.options()))
    policy = ctx.stages.run(f"{it}/policy", f"{it}/policy", lambda out: update_policy(
        PolicyStage.of(c), ctx.stages, ctx.i, prev, prm, rollouts, ctx.tasks, out, ctx.progress))
    return IterationResult(policy, prm)
