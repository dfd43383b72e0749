"""`agentprm train-policy`: AgentPRM stage 3 — update π_{i-1} against a PRM, by online DPO (reference = π_{i-1}),
kl-distill, or beam-distill (SFT on PRM-guided beam search over `--tasks`). The flags are the loop's `policy`
section (policy/config.py `PolicyUpdateConfig`) and the update is the loop's own (`run_update`), so the π_i a loop
trains is the one this command trains from the same inputs and seed.
GRPO and SPRO need groups of fresh episodes and run inside `agentprm loop` (`algo: grpo|spro`)."""
from __future__ import annotations

from agentprm.commands.common import (add_checkpoint_flags, add_common, add_config_flags, add_device_flags,
                                      add_tracking_flags, config_from_args, write_summary)
from agentprm.outputs import declare
from agentprm.loop.config import RolloutConfig
from agentprm.policy.config import PolicyUpdateConfig
from agentprm.policy.update import UPDATES
from agentprm.train.config import check_lora


def register(sub) -> None:
    p = sub.add_parser("train-policy", help="online DPO or kl-distill of a policy against a PRM (stage 3)",
                       description=__doc__)
    p.add_argument("--policy", required=True, metavar="DIR", help="π_{i-1}: the policy to update (and reference)")
    p.add_argument("--prm", required=True, metavar="DIR", help="Q_i from `agentprm train-prm`")
    p.add_argument("--rollouts", required=True, metavar="PATH", help="π_{i-1}'s rollouts: where states come from")
    p.add_argument("--out", required=True, metavar="DIR", help="output policy folder π_i (replaced atomically)")
    p.add_argument("--mode", choices=("choose", "generate"), default="choose", help="how replies are sampled")
    p.add_argument("--tasks", metavar="DIR", help="beam-distill: the train tasks to search on (`agentprm tasks`)")
    add_config_flags(p, PolicyUpdateConfig, skip=("critic",), choices={"method": tuple(UPDATES)})
    add_config_flags(p, RolloutConfig, only=("max_steps",))
    p.add_argument("--steer-frac", type=float, default=0.0, help="share of generations with the steered prompt")
    add_device_flags(p)
    add_tracking_flags(p)
    add_checkpoint_flags(p)
    add_common(p)
    declare(p, {"out": "model"}, inputs=("policy", "prm", "rollouts", "tasks"))
    p.set_defaults(func=run)


def run(args) -> int:
    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.lm import LMAgent
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.errors import require
    from agentprm.policy.online_dpo import rollout_states
    from agentprm.policy.update import UpdateContext, run_update
    from agentprm.prm.loading import load_prm

    cfg = config_from_args(PolicyUpdateConfig, args)
    require(cfg.method != "online-dpo" or cfg.samples_per_state >= 2,
            f"--samples-per-state must be at least 2 (got {cfg.samples_per_state})")
    require(cfg.method != "kl-distill" or args.mode == "choose", "--method kl-distill needs --mode choose")
    require(cfg.method != "beam-distill" or args.tasks, "--method beam-distill needs --tasks DIR to search on")
    check_lora(cfg.lora)
    tasks = load_tasks(args.tasks) if args.tasks else ()
    policy = LMAgent.load(args.policy, mode=args.mode, seed=args.seed)
    states = rollout_states(args.rollouts)
    require(states, f"{args.rollouts}: no states to update on (the rollouts hold no steps)")   # it hung without a word
    result = run_update(policy, load_prm(args.prm), states, cfg, UpdateContext(
        args.seed, args.policy, steer_frac=args.steer_frac, tasks=tasks, max_steps=args.max_steps))
    result.details["prm"] = args.prm
    save_policy(policy.backend.model, policy.tokenizer, args.out, policy.prompt_cfg, merge=cfg.lora.merge,
                **result.meta())
    last = result.history[-1]
    print(f"{len(states)} states, {last['step']} steps ({cfg.method}): loss {last['loss']:.4f} -> {args.out}")
    write_summary(args, {"states": len(states), **result.record()})
    return 0
