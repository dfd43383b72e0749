"""The control for beam search: is it the PRM that makes beam(2, 2) beat its greedy policy, or the second
branch? The same beam on the same eval games with a critic that knows nothing (seeded uniform scores) next to the
sweep's beam with Q_i, both paired against greedy π_i.

    python scripts/beam_control.py --sweep runs/cmp --variant agentprm --seeds 0 1 --width 2 --expand 2

Reads <sweep>/<variant>/seed<k> (the runs) and <sweep>/search/seed<k>-<w>x<e>.json (scripts/sweep.py's search rows);
writes <sweep>/search/control-seed<k>-<w>x<e>.json (reused when present) and <sweep>/beam_control.md.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.data.summary import pooled_rows, rate_cells
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.eval.play import EvalPlay, play_eval
from agentprm.io import write_json, write_text
from agentprm.loop.config import load_config
from agentprm.search import UniformCritic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, required=True)
    ap.add_argument("--variant", default="agentprm")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--width", type=int, default=2)
    ap.add_argument("--expand", type=int, default=2)
    args = ap.parse_args()
    from agentprm.agent.lm import LMAgent
    from agentprm.envs.alfworld.tasks import load_tasks

    w, e, rows = args.width, args.expand, {"greedy": {}, "beam (Q)": {}, "beam (uniform critic)": {}}
    for seed in args.seeds:
        run = args.sweep / args.variant / f"seed{seed}"
        cfg = load_config(run / "config.yaml")
        last = cfg.iterations
        results = json.loads((run / "results.json").read_text())["rows"]
        rows["greedy"][seed] = next(r for r in results if r["iteration"] == last and r["best_of_n"] == 1)
        rows["beam (Q)"][seed] = json.loads((args.sweep / "search" / f"seed{seed}-{w}x{e}.json").read_text())[1]
        saved = args.sweep / "search" / f"control-seed{seed}-{w}x{e}.json"
        if not saved.exists():
            tasks = load_tasks(cfg.tasks.eval_dir or run / "tasks/eval", cfg.tasks.types)
            gen = LMAgent.load(run / f"iter_{last}" / "policy", mode=cfg.rollout.mode,
                               temperature=cfg.eval.bon_temperature, seed=seed)
            how = EvalPlay(cfg.eval.episodes_per_task, cfg.eval.max_steps, seed + 1000, workers=2)
            _, beam = play_eval(gen, tasks, how, critic=UniformCritic(seed), beam=(w, e))
            write_json(saved, {"policy": f"beam-{w}x{e} (uniform)", "iteration": last, "best_of_n": w * e, **beam})
        rows["beam (uniform critic)"][seed] = json.loads(saved.read_text())
    per_task = {name: {s: r["per_task"] for s, r in by_seed.items()} for name, by_seed in rows.items()}
    comps = [{"a": a, "b": b, "a_best_of_n": w * e, "b_best_of_n": 1 if b == "greedy" else w * e,
              **paired_difference(per_task[a], per_task[b])}
             for a, b in (("beam (Q)", "greedy"), ("beam (uniform critic)", "greedy"),
                          ("beam (Q)", "beam (uniform critic)"))]
    lines = [f"Beam {w}x{e} with the runs' Q vs with a uniform critic, {args.sweep}/{args.variant}, seeds {args.seeds}",
             "", "| row | success % | 95% CI | episodes |", "|---|---|---|---|"]
    for name, by_seed in rows.items():
        pooled = pooled_rows({s: [{**r, "policy": name, "iteration": 0, "best_of_n": 1}] for s, r in by_seed.items()})
        lines.append(f"| {name} | {rate_cells(pooled[0])} |")
    text = "\n".join(lines + ["", comparisons_table(comps)]) + "\n"
    write_text(args.sweep / "beam_control.md", text)
    print(text)


if __name__ == "__main__":
    main()
