"""InversePRM (arXiv 2502.10325 §4), one iteration — no outcome reward is used:
rollouts of π_{i-1} → InversePRM Q_i from expert demos (D⁺) vs those rollouts (D⁻) → online DPO π_i vs π_{i-1} →
eval π_i and BoN(π_i, Q_i). With `exploration.reset_frac` > 0 that share of the rollouts starts on the demos
(Reset-50-50, agentprm/rollout/reset.py). Iteration 0 is π0; with `policy0.retrain: true` it is SFT on the same
demos (the paper's baseline), which this algorithm then reuses as D⁺."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import POLICY_UPDATE_FIELDS, register_algorithm
from agentprm.loop.policy_stage import PolicyStage, update_policy


def demos_path(loop, train_tasks) -> Path:
    """`inverse_prm.demos` if set; else the run's expert demos (`Loop.demos`), the same file π0's SFT trains on."""
    if loop.cfg.inverse_prm.demos:
        return Path(loop.cfg.inverse_prm.demos)
    return loop.demos(train_tasks)


@register_algorithm("inverse-prm", uses=(*POLICY_UPDATE_FIELDS, "exploration.reset_frac"))
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    from agentprm.agent.lm import LMAgent
    from agentprm.prm.inverse import read_episodes, train_inverse_prm

    c, seed, it = loop.cfg, loop.cfg.seed + i, f"iter_{i}"
    demos = demos_path(loop, train_tasks)
    rollouts = loop.rollouts(i, prev, train_tasks, demos=read_episodes(demos) if c.exploration.reset_frac > 0 else None)
    ic = c.inverse_prm
    init = prev if c.prm.init == "policy" else c.prm.init
    prm_cfg = ic.train_config(seed)

    def fit(out: Path) -> None:
        policy = LMAgent.load(prev, mode=c.rollout.mode, temperature=c.rollout.temperature, seed=seed,
                              name=f"pi{i - 1}")
        train_inverse_prm(demos, rollouts, policy, init, out, prm_cfg, ic.gamma, progress=loop.progress)

    prm = loop.stages.run(f"{it}/prm", f"{it}/prm", fit)
    policy = loop.stages.run(f"{it}/policy", f"{it}/policy", lambda out: update_policy(
        PolicyStage.of(c), loop.stages, i, prev, prm, rollouts, train_tasks, out, loop.progress))
    loop.evaluate_iteration(i, policy, prm, eval_tasks)
    return policy
