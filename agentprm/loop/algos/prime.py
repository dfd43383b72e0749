"""PRIME's implicit PRM (arXiv 2502.01456) in the AgentPRM loop, one iteration: rollouts of π_{i-1} → implicit PRM
r = β log(π_φ/π_ref) fitted to the episodes' outcomes only (no Q-targets) → online DPO π_i vs π_{i-1} against it →
eval π_i and BoN(π_i, implicit PRM). PRIME itself feeds its rewards to RLOO/PPO; using the same stage 3 as AgentPRM
keeps the comparison about the PRM alone."""
from __future__ import annotations

from pathlib import Path

from agentprm.loop.algos.registry import POLICY_UPDATE_FIELDS, register_algorithm
from agentprm.loop.policy_stage import PolicyStage, update_policy


@register_algorithm("prime", uses=POLICY_UPDATE_FIELDS)
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.prm.prime import ImplicitPRM, train_prime

    c, it = loop.cfg.prime, f"iter_{i}"
    rollouts = loop.rollouts(i, prev, train_tasks)

    def fit(out: Path) -> None:
        prm = ImplicitPRM.from_policy(prev, beta=c.beta)
        train_prime(prm, iter_episodes(read_trajectories(rollouts)), c.train_config(loop.cfg.seed + i),
                    progress=loop.progress)
        prm.save(out)

    prm = loop.stages.run(f"{it}/prm", f"{it}/prm", fit)
    policy = loop.stages.run(f"{it}/policy", f"{it}/policy", lambda out: update_policy(
        PolicyStage.of(loop.cfg), loop.stages, i, prev, prm, rollouts, train_tasks, out, loop.progress))
    loop.evaluate_iteration(i, policy, prm, eval_tasks)
    return policy
