"""The cost of one token-level RL step per method — GRPO, SPRO, PRIME — side by side in one run, on the same reasoner,
problems and sampling seeds: SPRO's training-efficiency claim (arXiv 2507.01551) in seconds, measured quietly.

    python bench/reason_rl_cost.py --reasoner runs/reason-rl/seed0/reasoner [--steps 10 --rounds 3]
    python bench/reason_rl_cost.py --reasoner DIR --study runs/reason-rl      # + seconds to GRPO's final accuracy

Each round runs `--steps` RL steps of every method from a fresh copy of the reasoner (scripts/reason_rl.py's
settings: 16 problems × 8 responses a step), the methods in turn, each round starting with the next one, so a
drift of the machine's speed or a warm-up hits them alike.
Printed: seconds per step (median over rounds and steps) and the ratio to GRPO's. With `--study` (a
scripts/reason_rl.py output folder), the steps each method took to reach GRPO's final accuracy per seed are read from
its summary.json and turned into seconds at the measured step cost: SPRO's efficiency claim at equal hardware.
Run it on a quiet machine with one torch thread per job (OMP_NUM_THREADS=1), as the study ran.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch

from agentprm.reason.check import checker
from agentprm.reason.config import ALGOS, ReasonRLConfig
from agentprm.reason.model import load_reasoner
from agentprm.reason.problems import chain_problems
from agentprm.reason.rl import train_rl

METHODS = {"grpo": {"algo": "grpo"}, "spro": {"algo": "spro"},
           "prime-filter": {"algo": "prime", "filter_low": 0.2, "filter_high": 0.8}}   # the study's names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reasoner", type=Path, required=True, help="a reasoner folder (scripts/reason_rl.py's seed<s>/reasoner)")
    ap.add_argument("--steps", type=int, default=10, help="RL steps per method per round (default 10)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--study", type=Path, help="a scripts/reason_rl.py folder: its steps to GRPO's final accuracy")
    args = ap.parse_args()
    if not (args.reasoner / "config.json").is_file():
        raise SystemExit(f"--reasoner {args.reasoner}: no model folder there (python scripts/reason_rl.py --out "
                         "runs/reason-rl --seeds 0 trains one)")
    assert {m["algo"] for m in METHODS.values()} <= set(ALGOS)
    torch.set_num_threads(1)
    base, tok = load_reasoner(args.reasoner)
    problems = chain_problems("train", 2000, seed=123)
    check = checker("numeric")
    per_step: dict[str, list[float]] = {name: [] for name in METHODS}
    names = list(METHODS)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:   # each round starts with the next method
            settings = METHODS[name]
            cfg = ReasonRLConfig(steps=args.steps, **settings)
            rows = train_rl(copy.deepcopy(base), tok, problems, cfg, check, seed=r)
            seconds = [rows[0]["seconds"]] + [b["seconds"] - a["seconds"] for a, b in zip(rows, rows[1:])]
            per_step[name] += seconds
            print(f"round {r} {name}: {statistics.median(seconds):.2f} s a step "
                  f"(mean response {statistics.mean(x['mean_length'] for x in rows):.1f} tokens)", flush=True)
    cost = {name: statistics.median(v) for name, v in per_step.items()}
    print("\n| method | s per RL step (median) | ratio to GRPO |\n|---|---|---|")
    for name, c in cost.items():
        print(f"| {name} | {c:.2f} | {c / cost['grpo']:.2f} |")
    if args.study:
        summary = json.loads((args.study / "summary.json").read_text())
        print(f"\nSteps to GRPO's final accuracy in {args.study} (per seed) and their seconds at the cost above:\n")
        print("| method | steps per seed | seconds per seed |\n|---|---|---|")
        for name in METHODS:
            reach = summary["methods"].get(name, {}).get("reach_grpo_final", [])
            steps = [r[0] for r in reach]
            print(f"| {name} | {', '.join(str(s) if s else 'not reached' for s in steps)} | "
                  f"{', '.join(f'{s * cost[name]:.0f}' if s else '—' for s in steps)} |")


if __name__ == "__main__":
    main()
