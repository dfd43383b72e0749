"""GRPO over whole episodes (outcome-only, no PRM), one iteration: rollouts of π_{i-1} (`rollout.per_task` per
task form the groups) → group-normalised outcome advantages → clipped policy gradient → eval π_i.
`policy_gradient_iteration` is shared with SPRO, which differs only in its process-reward β."""
from __future__ import annotations

from pathlib import Path

from agentprm.errors import UserError
from agentprm.loop.algos import register_algorithm


def policy_gradient_iteration(loop, i: int, prev: Path, train_tasks, eval_tasks, process_beta: float) -> Path:
    from agentprm.agent.encoding import PromptConfig
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.models import load_causal_lm, load_tokenizer
    from agentprm.policy.policy_gradient import PolicyGradientConfig, train_policy_gradient
    from agentprm.policy.sft import save_policy

    c, it = loop.cfg.policy_gradient, f"iter_{i}"
    # Reset-50-50 episodes start on an expert prefix: neither on-policy nor from the group's shared start state
    if loop.cfg.exploration.reset_frac > 0:
        raise UserError(f"algo {loop.cfg.algo!r}: groups must be π_{{i-1}}'s own episodes from the task start; "
                        "set exploration.reset_frac: 0")
    rollouts = loop.rollouts(i, prev, train_tasks)
    cfg = PolicyGradientConfig(process_beta=process_beta, clip=c.clip, entropy_coef=c.entropy_coef, steps=c.steps,
                               batch_groups=c.batch_groups, lr=c.lr, seed=loop.cfg.seed + i)

    def update(out: Path) -> None:
        model, tokenizer, prompt = load_causal_lm(prev), load_tokenizer(prev), PromptConfig.load(prev)
        history = train_policy_gradient(model, tokenizer, prompt, iter_episodes(read_trajectories(rollouts)), cfg,
                                        progress=loop.progress)
        save_policy(model, tokenizer, out, prompt,
                    policy_gradient={"config": cfg.to_dict(), "history": history, "reference": str(prev)})

    policy = loop.stages.run(f"{it}/policy", f"{it}/policy", update)
    loop.evaluate_iteration(i, policy, None, eval_tasks)
    return policy


@register_algorithm("grpo")
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    return policy_gradient_iteration(loop, i, prev, train_tasks, eval_tasks, process_beta=0.0)
