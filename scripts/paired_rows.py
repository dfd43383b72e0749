"""Paired differences between any two eval rows of a sweep's runs, over the seeds both have (the sweep's own table
compares each variant with its π0 and with the baseline; this compares anything with anything, e.g. an update with
its control):

    python scripts/paired_rows.py --sweep runs/distill beam-distill/pi1:beam-distill-uniform/pi1 \\
        beam-distill/pi1:agentprm/pi1 beam-distill/pi2:beam-distill/pi1

Each argument is A:B with A, B = <variant>/<eval row> (the row's file <sweep>/<variant>/seed<k>/evals/<row>.json,
e.g. pi1, pi1_bon4, pi1_beam2x2) or <variant>/<path> for any other eval summary under the seed folder, without
.json (scripts/update_ceiling.py's rows: continuation-240/ceiling/evals/expert). Prints Δ success (A − B) in points with its paired bootstrap 95% CI (seeds
resampled, then tasks within each seed — a claim about the training method; `--tasks-only` holds the seeds fixed,
a claim about these trained runs; eval/paired.py) and the seeds and episodes it covers.

`--sweep` given more than once pools the sweeps: the same rows of several folders — typically the same policies
played on several eval sets — count as one comparison, each (sweep, seed) a stratum, and the seeds of one sweep that
played the same games share their bootstrap draw, so a game set is resampled as one sample of games:

    python scripts/paired_rows.py --sweep runs/distill30k --sweep runs/distill30k-s2eval --sweep runs/distill30k-s3eval \
        q12k+layout/best-x3-s750/evals/pi1:pi0/evals/pi1
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.eval.paired import paired_difference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, required=True, action="append",
                    help="a sweep folder; repeat it to pool several (e.g. one per eval set)")
    ap.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=[0, 1, 2],
                    help="comma-separated, e.g. 0,1 (default 0,1,2: those the rows have)")
    ap.add_argument("--tasks-only", action="store_true",
                    help="resample tasks within fixed seeds (these runs), not seeds then tasks (the method)")
    ap.add_argument("pairs", nargs="+", metavar="A:B")
    args = ap.parse_args()

    for pair in args.pairs:
        a, b = pair.split(":")
        strata = [(i, s) for i in range(len(args.sweep)) for s in args.seeds
                  if row_path(args.sweep[i], a, s).exists() and row_path(args.sweep[i], b, s).exists()]
        if not strata:
            print(f"{a} − {b}: no seed has both rows")
            continue
        d = paired_difference(*({(i, s): json.loads(row_path(args.sweep[i], row, s).read_text())["per_task"]
                                 for i, s in strata} for row in (a, b)), hierarchical=not args.tasks_only)
        where = (f"seeds {[s for _, s in strata]}" if len(args.sweep) == 1 else
                 "; ".join(f"{sweep}: seeds {[s for j, s in strata if j == i]}" for i, sweep in enumerate(args.sweep)))
        print(f"{a} − {b}: {100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}] "
              f"({where}; {d['episodes']} episodes, {d['tasks']} task-seeds; bootstrap: {d['bootstrap']})")


def row_path(sweep: Path, row: str, seed: int) -> Path:
    """<sweep>/<variant>/seed<k>/evals/<row>.json, or <sweep>/<variant>/seed<k>/<path>.json for a row with a path."""
    variant, rest = row.split("/", 1)
    return sweep / variant / f"seed{seed}" / ("evals/" if "/" not in rest else "") / f"{rest}.json"


if __name__ == "__main__":
    main()
