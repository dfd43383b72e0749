"""Seconds per iteration of the on-policy regime, by stage: a few iterations of configs/onpolicy-grpo.yaml (16 train
games × a group of 8 = 128 episodes an iteration, one pass of policy-gradient steps) with the given algorithms, on a
pool of train games and a small eval set, one run after the other (never at once).

    python bench/onpolicy_iteration.py --train runs/pool-1000 --eval runs/eval-36 --iterations 3 \
        --algos grpo gigpo agentprm [--out runs/bench-onpolicy]

Prints, per algorithm, the median over iterations of each stage's seconds (from the run's `.stages/*.done` markers)
and of the whole iteration (its own stages; evals excluded) — target ≤ 60 s for 128 episodes on 2 quiet cores — and
rollout episodes per second. Runs are resumable (a rerun continues them)."""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import yaml

from iteration_cost import stage_seconds   # bench/, beside this script

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "onpolicy-grpo.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=Path, required=True, help="a train task folder (the pool)")
    ap.add_argument("--eval", type=Path, required=True, help="an eval task folder (evaluated at the last iteration)")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--algos", nargs="+", default=["grpo"])
    ap.add_argument("--out", type=Path, default=Path("runs/bench-onpolicy"))
    args = ap.parse_args()
    if args.iterations < 1:
        raise SystemExit(f"--iterations {args.iterations}: must be at least 1")
    from agentprm.cli import run_command

    base = yaml.safe_load(CONFIG.read_text())
    for algo in args.algos:
        cfg = {**base, "algo": algo, "iterations": args.iterations,
               "tasks": {**base["tasks"], "train_dir": str(args.train), "eval_dir": str(args.eval)},
               "eval": {**base["eval"], "every": args.iterations}}
        if algo not in ("grpo", "gigpo", "spro"):
            cfg.pop("policy_gradient")
        run, path = args.out / algo, args.out / f"{algo}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        if not (run / "results.json").exists():
            run_command("loop", "--config", path, "--run-dir", run, *(["--resume"] if run.exists() else []))
        seconds = stage_seconds(run)
        names = sorted({s.split("/", 1)[1] for s in seconds if s.startswith("iter_")})
        per = {n: [seconds[f"iter_{i}/{n}"] for i in range(1, args.iterations + 1) if f"iter_{i}/{n}" in seconds]
               for n in names}
        whole = [sum(v for s, v in seconds.items() if s.startswith(f"iter_{i}/")) for i in range(1, args.iterations + 1)]
        episodes = base["tasks"]["per_iteration"] * base["rollout"]["per_task"]
        print(f"{algo}: " + ", ".join(f"{n} {statistics.median(v):.1f} s" for n, v in per.items())
              + f"; one iteration {statistics.median(whole):.1f} s (median of {len(whole)}; target ≤ 60 s); "
              f"rollouts {episodes / statistics.median(per['rollouts']):.2f} episodes/s")


if __name__ == "__main__":
    main()
