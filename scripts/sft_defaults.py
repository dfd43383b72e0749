"""Does `agentprm sft` with its default settings give a working policy? (a default that produces a dud is a
trap.) Generates train games, plays the expert on them, runs `agentprm sft --demos D --out P` with no other flag,
and evaluates P greedily on held-out eval games beside the random baseline.

    python scripts/sft_defaults.py --work runs/sft-defaults --train-games 120 --eval-games 216 --seed 0

Every step is a plain agentprm command (printed as it runs) and is skipped when its output exists, so an interrupted
run continues. Writes <work>/sft_defaults.json with both evals and the SFT summary.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.cli import run_command


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--train-games", type=int, default=120)
    ap.add_argument("--eval-games", type=int, default=216)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    w, seed = args.work, args.seed
    w.mkdir(parents=True, exist_ok=True)
    train, evals, demos, policy = w / "tasks-train", w / "tasks-eval", w / "demos.parquet", w / "policy"
    if not (train / "tasks.jsonl").exists():
        run_command("tasks", "generate", "--out", train, "--split", "train", "--num", args.train_games, "--seed", seed)
    if not (evals / "tasks.jsonl").exists():
        run_command("tasks", "generate", "--out", evals, "--split", "eval", "--num", args.eval_games, "--seed", seed)
    if not demos.exists():
        run_command("demos", "--tasks", train, "--out", demos, "--seed", seed)
    if not (policy / "agentprm.json").exists():
        run_command("sft", "--demos", demos, "--out", policy, "--seed", seed, "--json", w / "sft.json")  # defaults only
    for name in ("policy", "random"):
        if not (w / f"eval-{name}.json").exists():
            run_command("eval", "--policy", policy if name == "policy" else "random", "--tasks", evals, "--seed", seed,
                        "--json", w / f"eval-{name}.json")
    sft = json.loads((w / "sft.json").read_text())
    result = {"train_games": args.train_games, "seed": seed,
              "sft": {k: sft[k] for k in ("examples", "episodes", "steps", "final_loss", "train_seconds")},
              **{name: {k: json.loads((w / f"eval-{name}.json").read_text())[k]
                        for k in ("success_rate", "ci95", "episodes")} for name in ("policy", "random")}}
    (w / "sft_defaults.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
