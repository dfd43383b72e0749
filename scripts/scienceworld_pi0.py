"""A ScienceWorld π0 with a fixed seed: task folders → gold-path demos → SFT of the tiny preset → eval on unseen
variations, beside the random-command and gold-path baselines on the same tasks.

    python scripts/scienceworld_pi0.py --work runs/sw-pi0                      # the setting in docs/results.md
    python scripts/scienceworld_pi0.py --work runs/sw-pi0 --train 60 --eval 30 --steps 200   # minutes: a smoke check

Every stage is the `agentprm` command a user would run (tasks generate --env scienceworld, demos, sft, eval), so the
recipe is the documentation; a rerun with the same --work skips the stages whose output is there. Train tasks are
ScienceWorld's train variations, eval tasks its test variations (disjoint), both spread evenly over the 30 task
types. SFT uses the "plain" prompt format (the task, the first observation, the last turns) and no renumbered copies
(object numbering is ALFWorld's). Needs `pip install 'agentprm[scienceworld]'` and Java (`make java`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.cli import run_command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, required=True, help="folder for tasks, demos, π0 and the evals (reused)")
    p.add_argument("--train", type=int, default=120, help="train variations (default 120: 4 per task type)")
    p.add_argument("--eval", type=int, default=60, help="test variations to evaluate on (default 60: 2 per type)")
    p.add_argument("--steps", type=int, default=1000, help="SFT optimiser steps (default 1000)")
    p.add_argument("--max-steps", type=int, default=50, help="eval step budget per episode (default 50)")
    p.add_argument("--mode", choices=("choose", "generate"), default="choose", help="π0's decoding mode in eval")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    w, seed, workers = a.work, str(a.seed), str(a.workers)
    for split, num in (("train", a.train), ("test", a.eval)):
        if not (w / f"tasks-{split}" / "tasks.jsonl").exists():
            run_command("tasks", "generate", "--env", "scienceworld", "--split", split, "--num", num, "--seed", seed,
                        "--out", w / f"tasks-{split}")
    if not (w / "demos.parquet").exists():
        run_command("demos", "--tasks", w / "tasks-train", "--out", w / "demos.parquet", "--max-steps", 150,
                    "--workers", workers, "--seed", seed, "--max-errors", a.train)
    if not (w / "pi0" / "model.safetensors").exists():
        run_command("sft", "--demos", w / "demos.parquet", "--out", w / "pi0", "--model", "tiny", "--steps", a.steps,
                    "--renumber-copies", 0, "--prompt-format", "plain", "--val-frac", 0, "--seed", seed)
    rows = {}
    for name, policy, mode in (("π0", w / "pi0", a.mode), ("random command", "random", "choose"),
                               ("gold path (expert)", "expert", "choose")):
        out = w / f"eval-{policy if isinstance(policy, str) else 'pi0'}.json"
        if not out.exists():
            run_command("eval", "--policy", policy, "--tasks", w / "tasks-test", "--mode", mode, "--max-steps",
                        a.max_steps if policy != "expert" else 150, "--seed", seed, "--workers", workers,
                        "--max-errors", a.eval, "--json", out)
        rows[name] = json.loads(out.read_text())
    print(f"\nScienceWorld, {a.eval} test variations ({a.max_steps}-step budget; the gold path 150):")
    for name, s in rows.items():
        lo, hi = s["ci95"]
        print(f"  {name:20s} success {100 * s['success_rate']:5.1f}%  [{100 * lo:.1f}, {100 * hi:.1f}]  "
              f"({s['successes']} of {s['episodes']})")


if __name__ == "__main__":  # env workers start by re-importing this file
    main()
