"""Variants of one loop config side by side over seeds: a sweep file's `base` config with each variant's overrides
(agentprm/loop/sweep.py), the stages a variant does exactly as the first one copied from it per seed.

    python scripts/ablations.py --config configs/sweeps/low-budget-exploration-shaping.yaml --seeds 0 1 2 --out runs/ablations

Every row (π0, each π_i, Best-of-N) is pooled over seeds' eval episodes (Wilson 95% CI) with per-seed rates; wall
time is the sum of the runs' stage seconds. Writes <out>/ablations.md and <out>/ablations.json; --resume continues.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from agentprm.eval.summary import per_seed_cell, rate_cells
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.sweep import load_variants, run_sweep


def markdown(sweep: dict[str, dict], seeds: list[int], config: str) -> str:
    lines = [f"Sweep `{config}`, seeds {seeds}; eval success pooled over seeds (Wilson 95% CI); wall time = the runs' "
             "stage seconds summed over seeds; own s = without the stages shared with the first variant.", "",
             "| variant | policy | Best-of-N | success % | 95% CI | episodes | per seed % | wall s | own s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, done in sweep.items():
        lines += [f"| {name} | {r['policy']} | {r['best_of_n']} | {rate_cells(r)} | {per_seed_cell(r)} | "
                  f"{done['wall_seconds']:.0f} | {done['own_seconds']:.0f} |" for r in done["rows"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="sweep file: base + variants")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/ablations")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    variants, out = load_variants(args.config), Path(args.out)
    sweep = run_sweep(variants, args.seeds, out, args.resume)
    write_json(out / "ablations.json", {"variants": sweep, "seeds": args.seeds, "provenance": provenance(
        {name: cfg.to_dict() for name, cfg in variants.items()}, None)})
    text = markdown(sweep, args.seeds, args.config)
    write_text(out / "ablations.md", text)
    print(text)


if __name__ == "__main__":
    main()
