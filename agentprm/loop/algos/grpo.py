"""GRPO over whole episodes (outcome-only, no PRM), one iteration: rollouts of π_{i-1} (`rollout.per_task` per
task form the groups) → group-normalised outcome advantages → clipped policy gradient → eval π_i.
`policy_gradient_iteration` is shared with SPRO, which differs only in its process-reward β, and GiGPO, which differs
only in its advantages."""
from __future__ import annotations

from pathlib import Path

from agentprm.agent.checkpoint import save_policy
from agentprm.agent.encoding import PromptConfig
from agentprm.loop.algos.registry import register_algorithm
from agentprm.policy.update import POLICY_GRADIENT, UpdateResult


def policy_gradient_iteration(loop, i: int, prev: Path, train_tasks, eval_tasks, process_beta: float,
                              gigpo: bool = False) -> Path:
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.models import load_causal_lm, load_tokenizer
    from agentprm.policy.policy_gradient import train_policy_gradient

    cfg, it, seed = loop.cfg.policy_gradient, f"iter_{i}", loop.cfg.seed + i
    # groups are π_{i-1}'s own episodes from the task start (Reset-50-50 is refused at config load)
    rollouts = loop.rollouts(i, prev, train_tasks)

    def update(out: Path) -> None:
        model, tokenizer, prompt = load_causal_lm(prev), load_tokenizer(prev), PromptConfig.load(prev)
        details = {"process_beta": process_beta, "advantages": "gigpo" if gigpo else "spro" if process_beta else "grpo"}
        if cfg.lora.r:   # adapters on π_{i-1} (models/lora.py)
            from agentprm.models.lora import add_lora, trainable

            model = add_lora(model, cfg.lora, seed=seed)
            details["lora"] = trainable(model)
        history = train_policy_gradient(model, tokenizer, prompt, iter_episodes(read_trajectories(rollouts)), cfg,
                                        process_beta, seed, progress=loop.progress, gigpo=gigpo)
        result = UpdateResult(POLICY_GRADIENT, history, cfg.to_dict(), seed, str(prev), details)
        save_policy(model, tokenizer, out, prompt, merge=cfg.lora.merge, **result.meta())

    policy = loop.stages.run(f"{it}/policy", f"{it}/policy", update)
    loop.evaluate_iteration(i, policy, None, eval_tasks)
    return policy


@register_algorithm("grpo")
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    return policy_gradient_iteration(loop, i, prev, train_tasks, eval_tasks, process_beta=0.0)
