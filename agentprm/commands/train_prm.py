"""`agentprm train-prm`: fit a process reward model Q_φ(s, a) to Monte-Carlo Q-targets (AgentPRM stage 2)."""
from __future__ import annotations

from agentprm.commands.common import add_common, write_summary
from agentprm.prm.losses import PRM_LOSSES
from agentprm.prm.train import PrmDataConfig, train_prm
from agentprm.train.core import TrainConfig

_DEFAULTS = TrainConfig()


def register(sub) -> None:
    p = sub.add_parser("train-prm", help="train a process reward model on Q-targets", description=__doc__)
    p.add_argument("--targets", required=True, metavar="FILE", help="targets .parquet from `agentprm targets mc`")
    p.add_argument("--init", required=True, metavar="DIR|PRESET",
                   help="policy/causal-LM folder (its backbone, tokenizer and prompt) or a preset name")
    p.add_argument("--loss", default="soft-bce", choices=sorted(PRM_LOSSES), help="default soft-bce")
    p.add_argument("--out", required=True, metavar="DIR", help="output PRM folder (replaced atomically)")
    p.add_argument("--rollouts", metavar="PATH", help="rollouts the targets were made from (default: as recorded)")
    p.add_argument("--epochs", type=float, default=_DEFAULTS.epochs, help=f"default {_DEFAULTS.epochs}")
    p.add_argument("--lr", type=float, default=_DEFAULTS.lr, help=f"peak learning rate (default {_DEFAULTS.lr})")
    p.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size, help=f"default {_DEFAULTS.batch_size}")
    p.add_argument("--time-budget", type=float, default=0.0, metavar="S", help="stop training after S seconds")
    p.add_argument("--heldout-frac", type=float, default=PrmDataConfig.heldout_frac,
                   help=f"share of tasks held out (default {PrmDataConfig.heldout_frac})")
    p.add_argument("--delta", type=float, default=PrmDataConfig.delta,
                   help="pairs need a Q-target gap above this (Bradley-Terry, pairwise accuracy; default 0)")
    add_common(p)
    p.set_defaults(func=run)


def run(args) -> int:
    cfg = TrainConfig(lr=args.lr, epochs=args.epochs, batch_size=args.batch_size, time_budget_s=args.time_budget,
                      seed=args.seed)
    data = PrmDataConfig(heldout_frac=args.heldout_frac, delta=args.delta, rollouts=args.rollouts)
    metrics = train_prm(args.targets, args.init, args.loss, args.out, cfg, data, progress=True)
    for name, m in metrics["final"].items():
        print(f"{name:8s} n={m['n']:<6d} bce={_fmt(m['bce'])} spearman={_fmt(m['spearman'])} "
              f"pairwise_acc={_fmt(m['pairwise_accuracy'])} ({m['pairs']} pairs)")
    print(f"saved PRM to {args.out} ({metrics['seconds']} s)")
    write_summary(args, metrics)
    return 0


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"
