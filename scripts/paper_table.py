"""The paper's table, honestly: run the loop for several seeds and pool the results.

    python scripts/paper_table.py --config configs/paper.yaml --seeds 0 1 2 --out runs/paper

For every (policy, iteration, Best-of-N) row it pools the eval episodes of all seeds (Wilson 95% CI over
episodes) and lists the per-seed rates, next to the paper's single-seed numbers (Llama-3.2-3B, official
ALFWorld). Writes <out>/paper_table.md and <out>/paper_table.json; each seed's run folder keeps its own
results.json, report.md and plots, and is resumable (--resume).
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from agentprm.eval.paired import comparisons, comparisons_table
from agentprm.data.summary import per_seed_cell, pooled_rows, rate_cells
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.config import load_config
from agentprm.loop.run import Loop

# (policy, Best-of-N) -> the paper's success %; its only Best-of-N number is N = 16 on π3 with Q3
PAPER = {("pi0", 1): 64.9, ("pi1", 1): 73.9, ("pi2", 1): 85.8, ("pi3", 1): 88.1, ("pi3", 16): 91.0}


def markdown(rows: list[dict], seeds: list[int], config: str, comps: list[dict] = ()) -> str:
    lines = [f"Config `{config}`, seeds {seeds}; success pooled over seeds' eval episodes (Wilson 95% CI).", "",
             "| policy | Best-of-N | success % | 95% CI | episodes | per seed % | paper % |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        paper = PAPER.get((r["policy"], r["best_of_n"]))
        lines.append(f"| {r['policy']} | {r['best_of_n']} | {rate_cells(r)} | {per_seed_cell(r)} | "
                     f"{'' if paper is None else paper} |")
    if comps:
        lines += ["", "Paired differences (same eval tasks and seeds; bootstrap over tasks, seeds as strata):", "",
                  comparisons_table(comps)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/paper")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    base = load_config(args.config)
    per_seed = {}
    for seed in args.seeds:
        cfg = dataclasses.replace(base, seed=seed)
        per_seed[seed] = Loop(cfg, Path(args.out) / f"seed{seed}", resume=args.resume).run()["rows"]
    rows, comps = pooled_rows(per_seed), comparisons(per_seed)
    write_json(Path(args.out) / "paper_table.json", {"rows": rows, "comparisons": comps, "seeds": args.seeds,
                                                     "provenance": provenance(base.to_dict(), None)})
    text = markdown(rows, args.seeds, args.config, comps)
    write_text(Path(args.out) / "paper_table.md", text)
    print(text)


if __name__ == "__main__":
    main()
