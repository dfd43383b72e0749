"""`agentprm train-prm`: fit a process reward model Q_φ(s, a) to Monte-Carlo Q-targets (AgentPRM stage 2). The
training flags are the loop's `prm` section (prm/train.py `PrmConfig`), with its defaults: the PRM a loop trains
is the one this command trains from the same targets and seed."""
from __future__ import annotations

import dataclasses

from agentprm.commands.common import (add_checkpoint_flags, add_common, add_config_flags, add_device_flags,
                                      add_tracking_flags, config_from_args, write_summary)
from agentprm.outputs import declare
from agentprm.prm.config import PrmConfig, PrmDataConfig


def register(sub) -> None:
    p = sub.add_parser("train-prm", help="train a process reward model on Q-targets", description=__doc__)
    p.add_argument("--targets", required=True, metavar="FILE", help="targets .parquet from `agentprm targets mc`")
    p.add_argument("--init", required=True, metavar="DIR|PRESET",
                   help="policy/causal-LM folder (its backbone, tokenizer and prompt) or a preset name")
    p.add_argument("--out", required=True, metavar="DIR", help="output PRM folder (replaced atomically)")
    add_config_flags(p, PrmConfig, skip=("init",))
    add_config_flags(p, PrmDataConfig)
    p.add_argument("--time-budget", type=float, default=0.0, metavar="S", help="stop training after S seconds")
    add_device_flags(p)
    add_tracking_flags(p)
    add_checkpoint_flags(p)
    add_common(p)
    declare(p, {"out": "model"}, inputs=("targets", "init"))
    p.set_defaults(func=run)


def run(args) -> int:
    from agentprm.prm.losses import get_prm_loss
    from agentprm.prm.train import train_prm

    get_prm_loss(args.loss)       # an unknown --loss: a one-line error naming the registered ones
    prm = config_from_args(PrmConfig, args, init=args.init)
    cfg = dataclasses.replace(prm.train_config(args.seed), time_budget_s=args.time_budget)
    metrics = train_prm(args.targets, args.init, prm.loss, args.out, cfg, config_from_args(PrmDataConfig, args),
                        progress=True, **prm.options())
    for name, m in metrics["final"].items():
        print(f"{name:8s} n={m['n']:<6d} bce={_fmt(m['bce'])} spearman={_fmt(m['spearman'])} "
              f"pairwise_acc={_fmt(m['pairwise_accuracy'])} ({m['pairs']} pairs)")
    print(f"saved PRM to {args.out} ({metrics['seconds']} s)")
    write_summary(args, metrics)
    return 0


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
