"""How far each π_i of a run has moved from π0, on the states π0 itself visits: per evaluated iteration, the mean
KL(π_i ‖ π0) of the choose-mode distributions over the admissible commands, π_i's mean entropy, and how often π_i's
greedy command is π0's. A policy that drifts with nothing holding it near π0 shows it here before its success falls.

    python scripts/policy_drift.py --run runs/onpolicy/grpo/seed0 --every 5 --states 256 --out drift.json

The states are spread evenly over π0's greedy eval episodes (evals/pi0.parquet) — the same for every π_i; the
policies are the run's policy_0 and iter_<i>/policy folders. Writes the table as JSON (`--out`) and prints it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.eval.drift import DRIFT_STATES, DriftReference
from agentprm.io import write_json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished or running loop folder")
    ap.add_argument("--every", type=int, default=5, help="iterations between the policies measured")
    ap.add_argument("--states", type=int, default=DRIFT_STATES)
    ap.add_argument("--out", type=Path, help="write the table here as JSON")
    args = ap.parse_args()
    reference = DriftReference.of(args.run / "policy_0", args.run / "evals" / "pi0.parquet", args.states)
    iterations = sorted(int(p.parent.parent.name.removeprefix("iter_")) for p in args.run.glob("iter_*/policy/agentprm.json"))
    rows = []
    for i in [0] + [i for i in iterations if i % args.every == 0]:
        folder = args.run / "policy_0" if i == 0 else args.run / f"iter_{i}" / "policy"
        rows.append({"iteration": i, **reference.measure(folder)})
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        write_json(args.out, {"run": str(args.run), "states": len(reference.states), "rows": rows})


if __name__ == "__main__":
    main()
