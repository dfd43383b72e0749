"""Group policy gradient over whole episodes (no critic is trained), one iteration: rollouts of π_{i-1} on this
iteration's train tasks (`rollout.per_task` per task form the groups) → per-turn advantages from a registered
estimator (policy/advantages.py) → clipped policy gradient → π_i. Algo grpo runs the estimator
`policy_gradient.advantage` names (default: group-normalised outcomes); algos spro and gigpo are this recipe with
their own estimator (spro's π_ref: the frozen π0, `policy_gradient.spro_reference`)."""
from __future__ import annotations

from pathlib import Path

from agentprm.agent.checkpoint import save_policy
from agentprm.agent.encoding import PromptConfig
from agentprm.errors import UserError
from agentprm.loop.algos.registry import IterationContext, IterationResult, register_algorithm
from agentprm.policy.update import POLICY_GRADIENT, UpdateResult

SPRO_REFERENCES = ("initial", "previous")


def policy_gradient_iteration(ctx: IterationContext, prev: Path, advantage: str) -> IterationResult:
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.models import load_causal_lm, load_tokenizer
    from agentprm.policy.advantages import ADVANTAGES
    from agentprm.policy.policy_gradient import train_policy_gradient

    cfg, it, seed = ctx.cfg.policy_gradient, f"iter_{ctx.i}", ctx.seed
    estimator = ADVANTAGES.entry(advantage)
    # groups are π_{i-1}'s own episodes from the task start (Reset-50-50 is refused at config load)
    rollouts = ctx.rollouts(prev)
    # π_ref is the frozen π0 for SPRO's process reward (its paper) and for a KL penalty; else π_old, and nothing is kept
    initial = (estimator.uses_reference and cfg.spro_reference == "initial") or cfg.kl_coef > 0
    reference_dir = ctx.policy0() if initial else prev

    def update(out: Path) -> None:
        model, tokenizer, prompt = load_causal_lm(prev), load_tokenizer(prev), PromptConfig.load(prev)
        details = {"advantages": advantage, "process_beta": cfg.spro_beta if estimator.uses_reference else 0.0,
                   "process_reference": str(reference_dir) if estimator.uses_reference else None,
                   "kl_reference": str(reference_dir) if cfg.kl_coef > 0 else None}
        reference = load_causal_lm(reference_dir) if reference_dir != prev else None   # π0 past iteration 1
        if cfg.lora.r:   # adapters on π_{i-1} (models/lora.py)
            from agentprm.models.lora import add_lora, trainable

            model = add_lora(model, cfg.lora, seed=seed)
            details["lora"] = trainable(model)
        history = train_policy_gradient(model, tokenizer, prompt, iter_episodes(read_trajectories(rollouts)), cfg,
                                        advantage, seed, progress=ctx.progress, reference=reference)
        result = UpdateResult(POLICY_GRADIENT, history, cfg.to_dict(), seed, str(prev), details)
        save_policy(model, tokenizer, out, prompt, merge=cfg.lora.merge, **result.meta())

    return IterationResult(ctx.stages.run(f"{it}/policy", f"{it}/policy", update))


def check(cfg, where) -> None:
    from agentprm.policy.advantages import ADVANTAGES

    pg = cfg.policy_gradient
    if pg.advantage and pg.advantage not in ADVANTAGES:
        raise UserError(f"{where('policy_gradient.advantage')} must be a registered advantage estimator "
                        f"({', '.join(ADVANTAGES)}), got {pg.advantage!r}")
    if pg.spro_reference not in SPRO_REFERENCES:
        raise UserError(f"{where('policy_gradient.spro_reference')} must be one of {', '.join(SPRO_REFERENCES)}, got "
                        f"{pg.spro_reference!r}")
    if pg.kl_coef > 0 and pg.spro_reference == "previous" and ADVANTAGES.entry(pg.advantage or cfg.algo).uses_reference:
        raise UserError(f"{where('policy_gradient.kl_coef')}: the KL penalty's reference is the frozen π0, and "
                        "spro_reference 'previous' asks for π_(i-1): use one of the two")


@register_algorithm("grpo", check=check, uses=("policy_gradient.advantage",))
def iteration(ctx: IterationContext, prev: Path) -> IterationResult:
    return policy_gradient_iteration(ctx, prev, ctx.cfg.policy_gradient.advantage or "grpo")
