"""`agentprm sft`: train a policy on expert demonstrations; writes a Hugging Face folder that `rollout`/`eval` load.
The training flags are the loop's `policy0.sft` section (policy/sft.py `SFTConfig`), with its defaults."""
from __future__ import annotations

from agentprm.agent.encoding import PromptConfig
from agentprm.agent.format import FORMATS
from agentprm.commands.common import (add_checkpoint_flags, add_common, add_config_flags, add_device_flags,
                                      add_tracking_flags, config_from_args, write_summary)
from agentprm.errors import require
from agentprm.outputs import declare
from agentprm.policy.config import SFTConfig


def register(sub) -> None:
    p = sub.add_parser("sft", help="supervised fine-tuning of a policy on demonstrations (Parquet)")
    p.add_argument("--demos", required=True, metavar="FILE", help="demonstrations: a .parquet file or shard folder")
    p.add_argument("--out", required=True, metavar="DIR", help="output policy folder (replaced atomically)")
    add_config_flags(p, SFTConfig, skip=("time_budget_s", "prompt"))
    p.add_argument("--time-budget", type=float, default=SFTConfig.time_budget_s, dest="time_budget_s", metavar="SEC",
                   help="stop after SEC seconds (0 = none)")
    p.add_argument("--history-turns", type=int, default=PromptConfig.history_turns,
                   help=f"earlier turns shown in the prompt (default {PromptConfig.history_turns})")
    p.add_argument("--show-admissible", action="store_true", help="list the admissible commands in the prompt")
    p.add_argument("--prompt-format", choices=FORMATS, default=PromptConfig.format,
                   help="alfworld: the task, ALFWorld's parsed memory and the turns; plain: the task, the first "
                        "observation and the turns (other environments); turns: the task and the turns (an "
                        "observation that shows the whole state, e.g. Sokoban)")
    p.add_argument("--system-prompt", default=PromptConfig.system_prompt, metavar="TEXT",
                   help=f"the system message (default {PromptConfig.system_prompt!r})")
    add_device_flags(p)
    add_tracking_flags(p)
    add_checkpoint_flags(p)
    add_common(p)
    declare(p, {"out": "model"}, inputs=("demos", "model"))
    p.set_defaults(_labels={"time_budget_s": "--time-budget"})   # range errors name the flag as it is spelled
    p.set_defaults(func=run)


def run(args) -> int:
    require(args.epochs > 0 or args.steps >= 1, f"--steps must be at least 1 with --epochs 0 (got {args.steps})")
    from agentprm.policy.sft import train_sft

    cfg = config_from_args(SFTConfig, args, prompt=PromptConfig(
        show_admissible=args.show_admissible, history_turns=args.history_turns, format=args.prompt_format,
        system_prompt=args.system_prompt))
    metrics = train_sft(args.demos, args.out, cfg, seed=args.seed)
    print(f"trained {metrics['steps']} steps on {metrics['examples']} examples in {metrics['train_seconds']:.0f} s, "
          f"final loss {metrics['final_loss']:.3f}; wrote {args.out}")
    val = metrics["validation"]
    print(val["note"] if "note" in val else
          f"next-command accuracy on {val['states']} states of {val['games']} held-out demo games: "
          f"{val['accuracy']:.1%} (training games {val['train_accuracy']:.1%}) at step {val['saved_step']}")
    write_summary(args, metrics)
    return 0
