"""`agentprm sft`: train a policy on expert demonstrations; writes a Hugging Face folder that `rollout`/`eval` load."""
from __future__ import annotations

from agentprm.agent.encoding import PromptConfig
from agentprm.commands.common import add_common, write_summary
from agentprm.errors import require
from agentprm.io import check_replaceable


def register(sub) -> None:
    p = sub.add_parser("sft", help="supervised fine-tuning of a policy on demonstrations (Parquet)")
    p.add_argument("--demos", required=True, metavar="FILE", help="demonstrations: a .parquet file or shard folder")
    p.add_argument("--out", required=True, metavar="DIR", help="output policy folder (replaced atomically)")
    p.add_argument("--model", default="tiny", metavar="PRESET|PATH",
                   help="model preset trained from scratch (tiny, small) or a local HF model folder (default tiny)")
    p.add_argument("--epochs", type=float, default=3.0, help="passes over the examples (default 3)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=int, default=16, help="examples per step (default 16)")
    p.add_argument("--time-budget", type=float, default=0.0, metavar="SEC", help="stop after SEC seconds (0 = none)")
    p.add_argument("--history-turns", type=int, default=PromptConfig.history_turns,
                   help=f"earlier turns shown in the prompt (default {PromptConfig.history_turns})")
    p.add_argument("--show-admissible", action="store_true", help="list the admissible commands in the prompt")
    p.add_argument("--renumber-copies", type=int, default=0,
                   help="augmentation: extra copies of each demo with instance numbers permuted (default 0)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="STEPS",
                   help="also save the policy every STEPS steps to <out>-checkpoints/ (default: never)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (default: torch's choice; use 1 when other processes share the cores)")
    add_common(p)
    p.set_defaults(func=run)


def run(args) -> int:
    check_replaceable(args.out)   # before any work: --out never replaces a folder agentprm did not write
    require(args.epochs > 0, f"--epochs must be positive (got {args.epochs})")
    require(args.batch_size >= 1, f"--batch-size must be at least 1 (got {args.batch_size})")
    require(args.history_turns >= 0, f"--history-turns must be >= 0 (got {args.history_turns})")
    require(args.renumber_copies >= 0, f"--renumber-copies must be >= 0 (got {args.renumber_copies})")
    require(args.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {args.checkpoint_every})")
    import torch

    from agentprm.policy.sft import SFTConfig, train_sft  # imports transformers: keep `--help` fast

    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = SFTConfig(model=args.model, lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
                    time_budget_s=args.time_budget, seed=args.seed, renumber_copies=args.renumber_copies,
                    checkpoint_every=args.checkpoint_every,
                    prompt=PromptConfig(show_admissible=args.show_admissible, history_turns=args.history_turns))
    metrics = train_sft(args.demos, args.out, cfg)
    print(f"trained {metrics['steps']} steps on {metrics['examples']} examples in {metrics['train_seconds']:.0f} s, "
          f"final loss {metrics['final_loss']:.3f}; wrote {args.out}")
    write_summary(args, metrics)
    return 0
