"""Variants of one loop config side by side over seeds: a sweep file's `base` config with each variant's overrides
(agentprm/loop/sweep.py), the stages a variant does exactly as the first one copied from it per seed.

    python scripts/ablations.py --config configs/sweeps/low-budget-exploration-shaping.yaml --seeds 0 1 2 --out runs/ablations

Every row (π0, each π_i, Best-of-N) is pooled over seeds' eval episodes (Wilson 95% CI) with per-seed rates; wall
time is the sum of the runs' stage seconds. Paired differences (same eval tasks and seeds, bootstrap over tasks):
each variant's own claims (π1 vs π0, Best-of-N vs π1) and each variant's π1 and Best-of-N vs the first variant's.
Writes <out>/ablations.md and <out>/ablations.json; --resume continues.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from agentprm.eval.paired import comparisons, comparisons_table, paired_difference, row_name
from agentprm.data.summary import per_seed_cell, rate_cells
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.sweep import load_variants, run_sweep


def variant_comparisons(sweep: dict[str, dict]) -> list[dict]:
    """Each variant's claimed comparisons, then its non-π0 rows vs the same rows of the first variant."""
    first = next(iter(sweep))
    out = []
    for name, done in sweep.items():
        out += [{**c, "a": f"{name}: {c['a']}", "b": f"{name}: {c['b']}"} for c in comparisons(done["per_seed"])]
    base = sweep[first]["per_seed"]
    for name, done in list(sweep.items())[1:]:
        for r in next(iter(done["per_seed"].values())):
            if r["iteration"] == 0:
                continue
            key = (r["policy"], r["iteration"], r["best_of_n"])
            a = {s: next((x for x in rows if (x["policy"], x["iteration"], x["best_of_n"]) == key), None)
                 for s, rows in done["per_seed"].items()}
            b = {s: next((x for x in base.get(s, []) if (x["policy"], x["iteration"], x["best_of_n"]) == key), None)
                 for s in a}
            if all(x is not None and "per_task" in x for x in (*a.values(), *b.values())):
                out.append({"a": f"{name}: {row_name(r)}", "b": f"{first}: {row_name(r)}",
                            "a_best_of_n": r["best_of_n"], "b_best_of_n": r["best_of_n"],
                            **paired_difference({s: x["per_task"] for s, x in a.items()},
                                                {s: x["per_task"] for s, x in b.items()})})
    return out


def markdown(sweep: dict[str, dict], seeds: list[int], config: str, comps: list[dict] = ()) -> str:
    lines = [f"Sweep `{config}`, seeds {seeds}; eval success pooled over seeds (Wilson 95% CI); wall time = the runs' "
             "stage seconds summed over seeds; own s = without the stages shared with the first variant.", "",
             "| variant | policy | Best-of-N | success % | 95% CI | episodes | per seed % | wall s | own s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, done in sweep.items():
        lines += [f"| {name} | {r['policy']} | {r['best_of_n']} | {rate_cells(r)} | {per_seed_cell(r)} | "
                  f"{done['wall_seconds']:.0f} | {done['own_seconds']:.0f} |" for r in done["rows"]]
    if comps:
        lines += ["", "Paired differences (same eval tasks and seeds; bootstrap over tasks, seeds as strata):", "",
                  comparisons_table(comps)]
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
    comps = variant_comparisons(sweep)
    write_json(out / "ablations.json", {"variants": {n: {k: v for k, v in d.items() if k != "per_seed"}
                                                     for n, d in sweep.items()},
                                        "comparisons": comps, "seeds": args.seeds, "provenance": provenance(
        {name: cfg.to_dict() for name, cfg in variants.items()}, None)})
    text = markdown(sweep, args.seeds, args.config, comps)
    write_text(out / "ablations.md", text)
    print(text)


if __name__ == "__main__":
    main()
