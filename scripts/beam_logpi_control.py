"""Issue 26: is beam search's gain with Q the *learned critic's*, or would π's own confidence rank the branches as
well? The loop plays beam(π_i, Q_i) and beam(π_i, uniform critic); this plays the same beam on the same eval games
with the critic-free ranker — π_i's own log π of each branch's next command (search/policy.py PolicyCritic) — with
the loop's own seeds, so all three beams draw the same first candidates on every game (common random numbers).

    python scripts/sweep.py --config configs/quickstart.yaml --seeds 0 1 2 --out runs/quickstart-seeds
    python scripts/beam_logpi_control.py --sweep runs/quickstart-seeds --seeds 0 1 2

Reads <sweep>/seed<k> (the loops' run folders: evals/pi<i>.json, pi<i>_beam<w>x<e>.json and its _uniform row);
writes <sweep>/beam-logpi/seed<k>.json (reused when present) and <sweep>/beam_logpi.md, the rows and their paired
differences (eval/paired.py: each seed's own eval games).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.data.summary import pooled_rows, rate_cells
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.io import write_json, write_text
from agentprm.loop.config import load_config

ROWS = ("greedy π", "beam (Q)", "beam (uniform critic)", "beam (log π)")
CLAIMS = (("beam (Q)", "beam (log π)"), ("beam (log π)", "beam (uniform critic)"), ("beam (log π)", "greedy π"),
          ("beam (Q)", "beam (uniform critic)"), ("beam (Q)", "greedy π"))


def play_logpi(run: Path, seed: int) -> dict:
    """Beam search (π_i, log π_i) on the run's eval games, seeded as the loop seeds its beam rows (loop/run.py
    evaluate_iteration: the sampler at seed + i, the episodes' streams at seed + 1000)."""
    from agentprm.agent.lm import LMAgent
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.eval.play import EvalPlay, play_eval
    from agentprm.search.policy import PolicyCritic

    cfg = load_config(run / "config.yaml")
    i, c, r = cfg.iterations, cfg.eval, cfg.rollout
    if cfg.seed != seed:
        raise SystemExit(f"{run / 'config.yaml'}: seed is {cfg.seed}, expected {seed}")
    sampler = LMAgent.load(run / f"iter_{i}" / "policy", mode=r.mode, temperature=c.bon_temperature,
                           seed=cfg.seed + i, decoding=cfg.decoding, name=f"pi{i}")
    how = EvalPlay(c.episodes_per_task, c.max_steps, cfg.seed + 1000, r.num_envs, r.workers)
    _, summary = play_eval(sampler, load_tasks(cfg.tasks.eval_dir or run / "tasks/eval", cfg.tasks.types), how,
                           critic=PolicyCritic(sampler), beam=(c.beam_width, c.beam_expand))
    return {"policy": f"pi{i}", "iteration": i, "best_of_n": c.beam_width * c.beam_expand,
            "search": f"beam{c.beam_width}x{c.beam_expand}-logpi", **summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    rows: dict[str, dict[int, dict]] = {name: {} for name in ROWS}
    for seed in args.seeds:
        run = args.sweep / f"seed{seed}"
        cfg = load_config(run / "config.yaml")
        i, w, e = cfg.iterations, cfg.eval.beam_width, cfg.eval.beam_expand
        if not w:
            raise SystemExit(f"{run / 'config.yaml'}: eval.beam_width is 0 — the run played no beam to control")
        evals = run / "evals"
        for name, file in zip(ROWS[:3], (f"pi{i}", f"pi{i}_beam{w}x{e}", f"pi{i}_beam{w}x{e}_uniform")):
            if not (evals / f"{file}.json").exists():
                raise SystemExit(f"{evals / f'{file}.json'}: missing — finish the run first")
            rows[name][seed] = json.loads((evals / f"{file}.json").read_text())
        saved = args.sweep / "beam-logpi" / f"seed{seed}.json"
        if not saved.exists():
            write_json(saved, play_logpi(run, seed))
        rows["beam (log π)"][seed] = json.loads(saved.read_text())
    per_task = {name: {s: r["per_task"] for s, r in by_seed.items()} for name, by_seed in rows.items()}
    comps = [{"a": a, "b": b, **paired_difference(per_task[a], per_task[b])} for a, b in CLAIMS]
    lines = [f"Beam with Q, with π's own log π and with a uniform critic, {args.sweep}, seeds {args.seeds}", "",
             "| row | success % | 95% CI | episodes | per seed % |", "|---|---|---|---|---|"]
    for name, by_seed in rows.items():
        pooled = pooled_rows({s: [{**r, "policy": name, "iteration": 0, "best_of_n": 1}] for s, r in by_seed.items()})
        per_seed = ", ".join(f"{100 * r['success_rate']:.1f}" for _, r in sorted(by_seed.items()))
        lines.append(f"| {name} | {rate_cells(pooled[0])} | {per_seed} |")
    lines += ["", comparisons_table(comps), "", "Per seed:"]
    for a, b in CLAIMS:
        cells = []
        for s in args.seeds:
            d = paired_difference({s: per_task[a][s]}, {s: per_task[b][s]})
            cells.append(f"{100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]")
        lines.append(f"- {a} − {b}: " + "; ".join(cells))
    text = "\n".join(lines) + "\n"
    write_text(args.sweep / "beam_logpi.md", text)
    print(text)


if __name__ == "__main__":
    main()
