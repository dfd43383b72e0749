"""InversePRM (arXiv 2502.10325 §4), one iteration — no outcome reward is used:
rollouts of π_{i-1} → InversePRM Q_i from expert demos (D⁺) vs those rollouts (D⁻) → online DPO π_i vs π_{i-1}; the
loop evaluates π_i and BoN(π_i, Q_i). With `exploration.reset_frac` > 0 that share of the rollouts starts on the demos
(Reset-50-50, agentprm/rollout/reset.py). Iteration 0 is π0; with `policy0.retrain: true` it is SFT on the same
demos (the paper's baseline), which this algorithm then reuses as D⁺."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import POLICY_UPDATE_FIELDS, IterationContext, IterationResult, register_algorithm
from agentprm.loop.policy_stage import PolicyStage, update_policy


def demos_path(ctx: IterationContext) -> Path:
    """`inverse_prm.demos` if set; else the run's expert demos on the train split, the file π0's SFT trains on."""
    if ctx.cfg.inverse_prm.demos:
        return Path(ctx.cfg.inverse_prm.demos)
    return ctx.demos()


@register_algorithm("inverse-prm", uses=(*POLICY_UPDATE_FIELDS, "exploration.reset_frac"))
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    from agentprm.agent.lm import LMAgent
    from agentprm.prm.inverse import read_episodes, train_inverse_prm

    c, seed, i, it = ctx.cfg, ctx.seed, ctx.i, f"iter_{ctx.i}"
    demos = demos_path(ctx)
    rollouts = ctx.rollouts(prev, demos=read_episodes(demos) if c.exploration.reset_frac > 0 else None)
    ic = c.inverse_prm
    init = prev if c.prm.init == "policy" else c.prm.init
    prm_cfg = ic.train_config(seed)

    def fit(out: Path) -> None:
        policy = LMAgent.load(prev, mode=c.rollout.mode, temperature=c.rollout.temperature, seed=seed,
                              name=f"pi{i - 1}")
        train_inverse_prm(demos, rollouts, policy, init, out, prm_cfg, ic.gamma, progress=ctx.progress)

    prm = ctx.stages.run(f"{it}/prm", f"{it}/prm", fit)
    policy = ctx.stages.run(f"{it}/policy", f"{it}/policy", lambda out: update_policy(
        PolicyStage.of(c), ctx.stages, i, prev, prm, rollouts, ctx.tasks, out, ctx.progress))
    return IterationResult(policy, prm)
