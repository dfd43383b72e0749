"""Loop configs × seeds → pooled rows, test-time search rows and paired differences, as markdown and JSON: the one
runner behind the paper table, the method comparison and the ablations of docs/results.md (each a sweep file under
configs/sweeps/; agentprm/loop/sweep.py has the format).

    python scripts/sweep.py --config configs/sweeps/agentprm-cpu.yaml --seeds 0 1 2 --out runs/cmp
    python scripts/sweep.py --config configs/default-budget.yaml --seeds 0 1 2 --out runs/default-seeds --paper

Each variant/seed is an ordinary resumable loop run under <out>/<variant>/seed<k>/ (a plain loop config: under
<out>/seed<k>/); a stage a variant does exactly as an earlier one is copied from it (same tasks, π0, its eval, π0's
rollouts), so every variant's iteration 1 starts from the very same data and rows are paired. Success is pooled
over seeds' eval episodes (Wilson 95% CI) with per-seed rates. Writes <out>/sweep.md and <out>/sweep.json;
--resume continues. With --outcomes DIR each finished run's eval outcomes go to DIR/<variant>-seed<k>.parquet (the
small files a study commits); --from-outcomes DIR writes the same tables from those files alone, over the seeds
every variant finished (no run folders needed, nothing is run).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from agentprm.data.summary import pooled_rows
from agentprm.errors import UserError
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.sweep import (load_sweep, outcome_path, read_sweep_outcomes, run_sweep, search_rows,
                                 sweep_comparisons, sweep_markdown)
from agentprm.outputs import check_output_file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="a sweep file (base + variants) or a plain loop config")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", required=True, help="the sweep's folder")
    ap.add_argument("--paper", action="store_true", help="the paper's numbers beside matching rows (also `paper:`)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--outcomes", help="write each finished run's eval outcomes (Parquet) into this folder")
    ap.add_argument("--from-outcomes", help="tables from this folder's outcome files alone; runs nothing")
    args = ap.parse_args(argv)
    try:
        sweep = load_sweep(args.config)
    except UserError as e:
        ap.exit(2, f"error: {e}\n")
    out = Path(args.out)
    if args.from_outcomes:
        try:
            found, args.seeds = read_sweep_outcomes(Path(args.from_outcomes))
        except UserError as e:
            ap.exit(2, f"error: {e}\n")
        summary = {n: found[n] for n in sweep.variants if n in found}   # the sweep file's order: its reference first
        sweep.search = None   # search rows are not in the outcome files
    else:
        try:   # a file of the user's where an outcome file would go: refused before any run, left as it is
            for name in sweep.variants if args.outcomes else ():
                for seed in args.seeds:
                    check_output_file(outcome_path(Path(args.outcomes), name, seed), "--outcomes ")
        except UserError as e:
            ap.exit(2, f"error: {e}\n")
        summary = run_sweep(sweep.variants, args.seeds, out, args.resume,
                            Path(args.outcomes) if args.outcomes else None)
    search, searched = [], None
    if sweep.search:
        name = sweep.search["variant"]
        per_seed = search_rows(sweep.variants[name], args.seeds, out / name, out / "search", sweep.search["width"],
                               sweep.search["expand"], args.resume)
        search, searched = pooled_rows(per_seed), (name, per_seed)
    comps = sweep_comparisons(summary, sweep.baseline, searched)
    write_json(out / "sweep.json", {
        "variants": {n: {k: v for k, v in d.items() if k != "per_seed"} for n, d in summary.items()},
        "search": search, "comparisons": comps, "seeds": args.seeds,
        "provenance": provenance({n: c.to_dict() for n, c in sweep.variants.items()}, None)})
    paper = [n for n, c in sweep.variants.items() if c.algo == "agentprm"] if args.paper or sweep.paper else []
    text = sweep_markdown(args.config, args.seeds, summary, paper, search, comps)
    write_text(out / "sweep.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
