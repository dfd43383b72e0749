"""Paired differences between any two eval rows of a sweep's runs, over the seeds both have (the sweep's own table
compares each variant with its π0 and with the baseline; this compares anything with anything, e.g. an update with
its control):

    python scripts/paired_rows.py --sweep runs/distill beam-distill/pi1:beam-distill-uniform/pi1 \\
        beam-distill/pi1:agentprm/pi1 beam-distill/pi2:beam-distill/pi1

Each argument is A:B with A, B = <variant>/<eval row> (the row's file <sweep>/<variant>/seed<k>/evals/<row>.json,
e.g. pi1, pi1_bon4, pi1_beam2x2) or <variant>/<path> for any other eval summary under the seed folder, without
.json (scripts/update_ceiling.py's rows: continuation-240/ceiling/evals/expert). Prints Δ success (A − B) in points with its paired bootstrap 95% CI (tasks
resampled within seeds, eval/paired.py) and the seeds and episodes it covers.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.eval.paired import paired_difference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, required=True)
    ap.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=[0, 1, 2],
                    help="comma-separated, e.g. 0,1 (default 0,1,2: those the rows have)")
    ap.add_argument("pairs", nargs="+", metavar="A:B")
    args = ap.parse_args()

    def path(row: str, seed: int) -> Path:
        variant, rest = row.split("/", 1)
        return args.sweep / variant / f"seed{seed}" / ("evals/" if "/" not in rest else "") / f"{rest}.json"

    for pair in args.pairs:
        a, b = pair.split(":")
        seeds = [s for s in args.seeds if path(a, s).exists() and path(b, s).exists()]
        if not seeds:
            print(f"{a} − {b}: no seed has both rows")
            continue
        d = paired_difference(*({s: json.loads(path(row, s).read_text())["per_task"] for s in seeds}
                                for row in (a, b)))
        print(f"{a} − {b}: {100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}] "
              f"(seeds {seeds}, {d['episodes']} episodes)")


if __name__ == "__main__":
    main()
