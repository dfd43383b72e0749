"""Does `agentprm sft` give a working policy, and does its held-out next-command accuracy say so? (a default that
produces a dud is a trap, and a dud that says nothing is worse.) Generates train games, plays the expert on them,
runs `agentprm sft --demos D --out P` (the defaults, or `--steps N`), evaluates P greedily on held-out eval games beside
the random baseline, and measures the next-command accuracy (the expert's command ranked first among the admissible
ones) of P and of the bundled π0 on the expert demos of those eval games.

    python scripts/sft_defaults.py --work runs/sft-defaults --train-games 120 --eval-games 216 --seed 0
    python scripts/sft_defaults.py --work runs/sft-1500 --train-games 120 --eval-games 36 --seed 0 --sft-seed 3 \\
        --steps 1500

Every step is a plain agentprm command (printed as it runs) and is skipped when its output exists, so an interrupted
run continues. Writes <work>/sft_defaults.json with both evals, the accuracies and the SFT summary.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.cli import run_command

BUNDLED = Path(__file__).resolve().parents[1] / "agentprm" / "assets" / "policy"


def eval_accuracy(policy: Path, demos: Path) -> float:
    """Next-command accuracy of `policy` on every state of `demos` (policy/sft.py `next_command_accuracy`)."""
    from agentprm.agent.lm import LMAgent
    from agentprm.policy.config import SFTConfig
    from agentprm.policy.sft import command_states, next_command_accuracy, usable_demos

    agent = LMAgent.load(policy)
    pairs = command_states(usable_demos(demos, SFTConfig()), limit=10**9)
    return round(next_command_accuracy(agent.backend.model, agent.tokenizer, agent.prompt_cfg, pairs), 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--train-games", type=int, default=120)
    ap.add_argument("--eval-games", type=int, default=216)
    ap.add_argument("--seed", type=int, default=0, help="games, demos and eval")
    ap.add_argument("--sft-seed", type=int, default=None, help="the SFT's seed (default --seed)")
    ap.add_argument("--steps", type=int, default=0, help="SFT steps (default: sft's own default)")
    args = ap.parse_args()
    w, seed = args.work, args.seed
    sft_seed = seed if args.sft_seed is None else args.sft_seed
    w.mkdir(parents=True, exist_ok=True)
    train, evals, demos, policy = w / "tasks-train", w / "tasks-eval", w / "demos.parquet", w / "policy"
    if not (train / "tasks.jsonl").exists():
        run_command("tasks", "generate", "--out", train, "--split", "train", "--num", args.train_games, "--seed", seed)
    if not (evals / "tasks.jsonl").exists():
        run_command("tasks", "generate", "--out", evals, "--split", "eval", "--num", args.eval_games, "--seed", seed)
    if not demos.exists():
        run_command("demos", "--tasks", train, "--out", demos, "--seed", seed)
    if not (w / "demos-eval.parquet").exists():
        run_command("demos", "--tasks", evals, "--out", w / "demos-eval.parquet", "--seed", seed)
    if not (policy / "agentprm.json").exists():
        steps = ["--steps", args.steps] if args.steps else []
        run_command("sft", "--demos", demos, "--out", policy, "--seed", sft_seed, *steps, "--json", w / "sft.json")
    for name in ("policy", "random"):
        if not (w / f"eval-{name}.json").exists():
            run_command("eval", "--policy", policy if name == "policy" else "random", "--tasks", evals, "--seed", seed,
                        "--json", w / f"eval-{name}.json")
    sft = json.loads((w / "sft.json").read_text())
    result = {"train_games": args.train_games, "seed": seed, "sft_seed": sft_seed,
              "sft": {k: sft[k] for k in ("examples", "episodes", "steps", "final_loss", "train_seconds")},
              "validation": sft.get("validation", {}),   # with its curve: accuracy against steps
              "eval_games_next_command_accuracy": {"policy": eval_accuracy(policy, w / "demos-eval.parquet"),
                                                   "bundled π0": eval_accuracy(BUNDLED, w / "demos-eval.parquet")},
              **{name: {k: json.loads((w / f"eval-{name}.json").read_text())[k]
                        for k in ("success_rate", "ci95", "episodes")} for name in ("policy", "random")}}
    (w / "sft_defaults.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
