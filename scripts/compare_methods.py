"""One table: SFT π0, AgentPRM, InversePRM, outcome-only GRPO, SPRO, PRIME — same tasks, same π0, same rollout
budget (`rollout.per_task` × train tasks × iterations), several seeds — and `sft`, π0 fine-tuned on the expert demos
InversePRM learns from (its demo-only control); plus Best-of-N vs beam search at equal samples per turn with the
AgentPRM run's π and Q.

    python scripts/compare_methods.py --config configs/compare.yaml --seeds 0 1 2 --out runs/compare

Each method/seed is an ordinary resumable loop run under <out>/<method>/seed<k>/ (--resume continues); the stages
all methods share for a seed (tasks, π0, its eval, π0's rollouts) run once and are copied (agentprm/loop/sweep.py). Success
is pooled over seeds' eval episodes (Wilson 95% CI) with per-seed rates; wall time is the sum over seeds of the
runs' stage seconds, each method charged the shared stages too.
Writes <out>/compare.md and <out>/compare.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.data.summary import per_seed_cell, pooled_rows, rate_cells
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.config import load_config
from agentprm.loop.sweep import run_sweep

METHODS = ("agentprm", "inverse-prm", "grpo", "spro", "prime", "sft")


def search_comparison(base, seeds: list[int], out: Path, width: int, expand: int,
                      resume: bool) -> dict[int, list[dict]]:
    """BoN(N = width × expand) vs beam(width, expand) with the AgentPRM runs' last π and Q, same eval tasks; each
    seed's pair of rows is saved to <out>/search/seed<k>-<width>x<expand>.json (reused with --resume)."""
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.policies import BestOfNAgent
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.eval.beam import play_beam
    from agentprm.rollout.play import play_tasks
    from agentprm.prm.loading import load_prm

    per_seed: dict[int, list[dict]] = {}
    for seed in seeds:
        saved = out / "search" / f"seed{seed}-{width}x{expand}.json"
        if resume and saved.exists():
            per_seed[seed] = json.loads(saved.read_text())
            continue
        run = out / "agentprm" / f"seed{seed}"
        last = f"iter_{base.iterations}"
        tasks = load_tasks(base.tasks.eval_dir or run / "tasks/eval", base.tasks.types)
        gen = lambda: LMAgent.load(run / last / "policy", mode=base.rollout.mode,  # noqa: E731
                                   temperature=base.eval.bon_temperature, seed=seed)
        prm = load_prm(run / last / "prm")
        _, bon = play_tasks(BestOfNAgent(gen(), prm, width * expand), tasks, per_task=base.eval.episodes_per_task,
                            seed=seed + 1000, max_steps=base.eval.max_steps, tag="bon")
        _, beam = play_beam(tasks, gen(), prm, width=width, expand=expand, max_steps=base.eval.max_steps,
                            seed=seed + 1000, workers=2, per_task=base.eval.episodes_per_task)
        per_seed[seed] = [{"policy": f"BoN-{width * expand}", "iteration": base.iterations, "best_of_n": width * expand,
                           **bon}, {"policy": f"beam-{width}x{expand}", "iteration": base.iterations,
                                    "best_of_n": width * expand, **beam}]
        write_json(saved, per_seed[seed])
    return per_seed


def method_comparisons(sweep: dict[str, dict], search: dict[int, list[dict]]) -> list[dict]:
    """The claims of the table as paired differences over the same eval tasks and seeds: every method's last π vs
    π0 and vs outcome-only GRPO, and each test-time search vs the greedy AgentPRM π it searches with (beam also vs
    Best-of-N)."""
    def final(name: str) -> tuple[str, dict[int, dict]]:
        per_seed = sweep[name]["per_seed"]
        last = max(r["iteration"] for rows in per_seed.values() for r in rows)
        return f"{name}: pi{last}", {s: next(r for r in rows if r["iteration"] == last and r["best_of_n"] == 1)
                                     for s, rows in per_seed.items()}

    first = next(iter(sweep))
    pi0 = ("SFT π0", {s: next(r for r in rows if r["iteration"] == 0)
                      for s, rows in sweep[first]["per_seed"].items()})
    finals = {name: final(name) for name in sweep}
    pairs = [(finals[m], pi0) for m in sweep]
    pairs += [(finals[m], finals["grpo"]) for m in sweep if "grpo" in sweep and m != "grpo"]
    if search and "agentprm" in sweep:
        rows = [{s: search[s][k] for s in search} for k in range(2)]
        bon, beam = ((r[next(iter(r))]["policy"], r) for r in rows)
        pairs += [(bon, finals["agentprm"]), (beam, finals["agentprm"]), (beam, bon)]
    out = []
    for (a, ra), (b, rb) in pairs:
        diff = paired_difference({s: r["per_task"] for s, r in ra.items()}, {s: r["per_task"] for s, r in rb.items()})
        out.append({"a": a, "b": b, "a_best_of_n": next(iter(ra.values()))["best_of_n"],
                    "b_best_of_n": next(iter(rb.values()))["best_of_n"], **diff})
    return out


def markdown(table: list[tuple[str, dict, dict]], search: list[dict], seeds: list[int], config: str,
             comps: list[dict] = ()) -> str:
    lines = [f"Config `{config}`, seeds {seeds}; eval success pooled over seeds (Wilson 95% CI); seconds summed over "
             "seeds: all stages, and the method's own (without the stages every method shares: tasks, π0's eval, "
             "π0's rollouts).", "",
             "| method | policy | success % | 95% CI | episodes | per seed % | wall s | own s |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {method} | {r['policy']} | {rate_cells(r)} | {per_seed_cell(r)} | {t['wall_seconds']:.0f} | "
              f"{t['own_seconds']:.0f} |" for method, r, t in table]
    if search:
        lines += ["", "| test-time search (samples/turn) | success % | 95% CI | episodes |", "|---|---|---|---|"]
        lines += [f"| {r['policy']} ({r['best_of_n']}) | {rate_cells(r)} |" for r in search]
    if comps:
        lines += ["", "Paired differences (same eval tasks and seeds; bootstrap over tasks, seeds as strata):", "",
                  comparisons_table(comps)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--out", default="runs/compare")
    ap.add_argument("--beam", type=int, nargs=2, default=[2, 2], metavar=("WIDTH", "EXPAND"))
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    base, out = load_config(args.config), Path(args.out)
    table = []
    sweep = run_sweep({algo: dataclasses.replace(base, algo=algo) for algo in args.methods}, args.seeds, out,
                      args.resume)
    for algo, done in sweep.items():
        rows, seconds = done["rows"], {k: done[k] for k in ("wall_seconds", "own_seconds")}
        last = max(r["iteration"] for r in rows)
        if not table:   # every method starts from the same π0: report it once, as "SFT"
            table.append(("SFT π0", next(r for r in rows if r["iteration"] == 0), {"wall_seconds": 0.0,
                                                                                 "own_seconds": 0.0}))
        table.append((algo, next(r for r in rows if r["iteration"] == last and r["best_of_n"] == 1), seconds))
    search = search_comparison(base, args.seeds, out, *args.beam, args.resume) if "agentprm" in args.methods else {}
    comps = method_comparisons(sweep, search)
    write_json(out / "compare.json", {"table": [{"method": m, **r, **t} for m, r, t in table],
                                      "search": pooled_rows(search), "comparisons": comps, "seeds": args.seeds,
                                      "provenance": provenance(base.to_dict(), None)})
    text = markdown(table, pooled_rows(search), args.seeds, args.config, comps)
    write_text(out / "compare.md", text)
    print(text)


if __name__ == "__main__":
    main()
