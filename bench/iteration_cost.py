"""The cost of one AgentPRM iteration per stage, at two or more rollout budgets, and how each stage grows.

    python bench/iteration_cost.py --rollouts 240 1440 [--out runs/bench-iteration] [--project 10000]
    python bench/iteration_cost.py --rollouts 240 10002 --prm-max-steps 1440 --prm-eval-rows 4096 \
        --out runs/bench-iteration-10k
    python bench/iteration_cost.py --rollouts 12000 --per-task 4 --prm-max-steps 3000 --prm-eval-rows 4096 \
        --out runs/bench-iteration-12k
    python bench/iteration_cost.py --rollouts 30000 --per-task 10 --prm-max-steps 3000 --prm-eval-rows 4096 \
        --out runs/bench-iteration-30k

Each budget n is one `agentprm loop` run of the quickstart's stages (configs/quickstart.yaml: π0 the bundled
policy, 6 rollouts per train task at T 1, MC targets at γ 0.9, soft-BCE PRM 2 epochs from π0, online DPO 60 steps)
on n / 6 generated train tasks (n / `--per-task` with that flag: 3,000 tasks × 4 rollouts for 12k, × 10 for 30k),
with the evaluation cut to 12 greedy games and no search (it is not part of an iteration's cost). Runs are resumable
(`--resume` on a rerun) and the budgets run one after the other, never at once.
Prints each stage's seconds (from the run's `.stages/*.done` markers) per budget, its growth exponent b between the
smallest and the largest budget (seconds ∝ n^b), and the seconds that exponent projects at `--project` rollouts —
a projection, printed as such, not a measurement. `--prm-max-steps` caps the PRM's optimiser steps (`prm.max_steps`;
1,440 ≈ 2 epochs over 1,440 rollouts' targets) and `--prm-eval-rows` the rows its before/after metrics score
(`prm.eval_rows`): the PRM stage then stops growing with the rollouts but for reading and tokenizing its targets.
Game generation is cached across runs (~/.cache/agentprm), so the `tasks` stages measure reading the cache, unless
the cache lacks the games.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

ITERATION = ("iter_1/rollouts", "iter_1/targets", "iter_1/prm", "iter_1/policy")   # one iteration's own stages
PER_TASK = 6


def config(n: int, prm_max_steps: int | None = None, prm_eval_rows: int | None = None,
           per_task: int = PER_TASK) -> dict:
    quickstart = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml").read_text())
    quickstart["tasks"] = {"train": n // per_task, "eval": 12}
    quickstart["rollout"]["per_task"] = per_task
    quickstart["eval"].update(beam_width=0, critic_control=False, best_of_n=[])
    for name, value in (("max_steps", prm_max_steps), ("eval_rows", prm_eval_rows)):
        if value:
            quickstart["prm"][name] = value
    return quickstart


def stage_seconds(run: Path) -> dict[str, float]:
    markers = [json.loads(p.read_text()) for p in sorted((run / ".stages").glob("*.done"))]
    return {m["stage"]: m["seconds"] for m in markers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rollouts", type=int, nargs="+", default=[240, 1440])
    ap.add_argument("--out", type=Path, default=Path("runs/bench-iteration"))
    ap.add_argument("--project", type=int, default=10_000, help="rollouts to project each stage's seconds to")
    ap.add_argument("--per-task", type=int, default=PER_TASK, help="rollouts per train task (rollout.per_task); "
                    "each budget is that many rollouts on budget / per-task tasks")
    ap.add_argument("--prm-max-steps", type=int, default=None, help="cap on the PRM's optimiser steps (prm.max_steps)")
    ap.add_argument("--prm-eval-rows", type=int, default=None, help="cap on the rows the PRM's metrics score "
                    "(prm.eval_rows)")
    args = ap.parse_args()
    if args.per_task < 1:
        raise SystemExit(f"--per-task {args.per_task}: must be at least 1")
    if any(n % args.per_task or n <= 0 for n in args.rollouts):
        raise SystemExit(f"--rollouts: each budget must be a positive multiple of --per-task ({args.per_task})")
    from agentprm.cli import run_command

    found = {}
    for n in sorted(set(args.rollouts)):
        run = args.out / f"n{n}"
        cfg = args.out / f"n{n}.yaml"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        loop_cfg = config(n, args.prm_max_steps, args.prm_eval_rows, args.per_task)
        cfg.write_text(yaml.safe_dump(loop_cfg, sort_keys=False))
        if not (run / "results.json").exists():
            run_command("loop", "--config", cfg, "--run-dir", run, *(["--resume"] if run.exists() else []))
        found[n] = stage_seconds(run)
    sizes = sorted(found)
    lo, hi = sizes[0], sizes[-1]
    stages = [s for s in ITERATION if s in found[hi]] + sorted(s for s in found[hi] if s.startswith("tasks"))
    head = " | ".join(f"{n:,} rollouts" for n in sizes)
    grows = hi > lo   # a growth exponent and its projection need two budgets
    print(f"| stage | {head} |" + (f" growth b (s ∝ n^b) | projected at {args.project:,} (not measured) |" if grows else ""))
    print("|---|" + "---|" * len(sizes) + ("---|---|" if grows else ""))
    totals, projected_total = {n: 0.0 for n in sizes}, 0.0
    for stage in stages:
        values = [found[n].get(stage, float("nan")) for n in sizes]
        b = math.log(values[-1] / values[0]) / math.log(hi / lo) if grows and values[0] > 0 else float("nan")
        projected = values[-1] * (args.project / hi) ** b if math.isfinite(b) else float("nan")
        if stage in ITERATION:
            for n, v in zip(sizes, values):
                totals[n] += v
            projected_total += projected
        print(f"| {stage} | " + " | ".join(f"{v:,.0f} s" for v in values) + " |"
              + (f" {b:.2f} | {projected:,.0f} s |" if grows else ""))
    print(f"| **one iteration** ({', '.join(s.split('/')[1] for s in ITERATION)}) | "
          + " | ".join(f"**{totals[n]:,.0f} s**" for n in sizes) + " |"
          + (f" | **{projected_total / 60:,.0f} min** (the stages' projections summed) |" if grows else ""))
    rates = [f"{n / found[n]['iter_1/rollouts']:.2f} at {n:,}" for n in sizes if found[n].get("iter_1/rollouts")]
    if rates:   # the rollouts' seconds include a resumed stage's earlier attempts (carried_seconds)
        print("rollouts/s: " + ", ".join(rates))

if __name__ == "__main__":
    main()
