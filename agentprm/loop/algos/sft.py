"""Behaviour cloning on the demos, one iteration — the demo-only control for InversePRM: π_i = π_{i-1} fine-tuned
by SFT on the same expert demos InversePRM learns its PRM from (`inverse_prm.demos`, else the run's demos),
`policy0.sft.epochs` passes (CONTROL_EPOCHS when that section counts steps) at `policy.lr` (the online-DPO update's
rate), without renumbered copies → eval π_i. No rollouts, no PRM."""
from __future__ import annotations

from pathlib import Path

from agentprm.agent.encoding import PromptConfig
from agentprm.loop.algos.registry import register_algorithm
from agentprm.loop.algos.inverse_prm import demos_path

CONTROL_EPOCHS = 3.0   # a few passes over the few demos of the run's train tasks (the method comparison's setting)


@register_algorithm("sft")
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    from agentprm.policy.sft import SFTConfig, train_sft

    c = loop.cfg
    demos = demos_path(loop, train_tasks)
    cfg = SFTConfig(model=str(prev), lr=c.policy.lr, epochs=c.policy0.sft.epochs or CONTROL_EPOCHS, renumber_copies=0,
                    prompt=PromptConfig.load(prev))
    policy = loop.stages.run(f"iter_{i}/policy", f"iter_{i}/policy",
                             lambda out: train_sft(demos, out, cfg, seed=c.seed + i, progress=loop.progress))
    loop.evaluate_iteration(i, policy, None, eval_tasks)
    return policy
