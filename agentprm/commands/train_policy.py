"""`agentprm train-policy`: AgentPRM stage 3 — update π_{i-1} against a PRM with online DPO (reference = π_{i-1}).
GRPO and SPRO need groups of fresh episodes and run inside `agentprm loop` (`algo: grpo|spro`)."""
from __future__ import annotations

from agentprm.commands.common import add_common, write_summary
from agentprm.policy.online_dpo import OnlineDPOConfig

_D = OnlineDPOConfig()


def register(sub) -> None:
    p = sub.add_parser("train-policy", help="online DPO of a policy against a PRM (stage 3)", description=__doc__)
    p.add_argument("--method", choices=("online-dpo",), default="online-dpo")
    p.add_argument("--policy", required=True, metavar="DIR", help="π_{i-1}: the policy to update (and reference)")
    p.add_argument("--prm", required=True, metavar="DIR", help="Q_i from `agentprm train-prm`")
    p.add_argument("--rollouts", required=True, metavar="PATH", help="π_{i-1}'s rollouts: where states come from")
    p.add_argument("--out", required=True, metavar="DIR", help="output policy folder π_i (replaced atomically)")
    p.add_argument("--mode", choices=("choose", "generate"), default="choose", help="how replies are sampled")
    p.add_argument("--beta", type=float, default=_D.beta, help=f"KL weight to π_{{i-1}} (default {_D.beta})")
    p.add_argument("--samples-per-state", type=int, default=_D.samples_per_state,
                   help=f"replies per state; best vs worst by Q (default {_D.samples_per_state})")
    p.add_argument("--temperature", type=float, default=_D.temperature, help=f"default {_D.temperature}")
    p.add_argument("--steps", type=int, default=_D.steps, help=f"optimiser steps (default {_D.steps})")
    p.add_argument("--batch-size", type=int, default=_D.batch_size, help=f"states per step (default {_D.batch_size})")
    p.add_argument("--lr", type=float, default=_D.lr, help=f"default {_D.lr}")
    p.add_argument("--steer-frac", type=float, default=0.0, help="share of generations with the steered prompt")
    add_common(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from agentprm.agent.lm import LMAgent
    from agentprm.errors import require
    from agentprm.policy.online_dpo import rollout_states, train_online_dpo
    from agentprm.policy.sft import save_policy
    from agentprm.prm.loading import load_prm

    require(args.samples_per_state >= 2, f"--samples-per-state must be at least 2 (got {args.samples_per_state})")
    require(args.steps >= 1, f"--steps must be at least 1 (got {args.steps})")
    policy = LMAgent.load(args.policy, mode=args.mode, seed=args.seed)
    prm = load_prm(args.prm)
    states = rollout_states(args.rollouts)
    cfg = OnlineDPOConfig(beta=args.beta, samples_per_state=args.samples_per_state, temperature=args.temperature,
                          steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    history, steered = train_online_dpo(policy, prm, states, cfg, steer_frac=args.steer_frac)
    meta = {"config": cfg.to_dict(), "history": history, "reference": args.policy, "prm": args.prm,
            "steer_frac": args.steer_frac, "steered_states": steered}
    save_policy(policy.backend.model, policy.tokenizer, args.out, policy.prompt_cfg, online_dpo=meta)
    last = history[-1]
    print(f"{len(states)} states, {last['step']} steps: loss {last['loss']:.4f}, PRM mean {last['prm_mean']:.3f}, "
          f"pairs/state {last['pair_frac']:.2f} -> {args.out}")
    write_summary(args, {"states": len(states), **meta})
    return 0
