"""Does Q1 see Sokoban's dead ends? On the eval episodes of a Sokoban loop run, every state is labelled by the
breadth-first-search solver, and Q1(s, a) of the move made there is asked two things (AUC: the chance that a random
positive scores above a random negative; a uniform critic scores 0.5):
- *states*: is s still solvable, or already lost (a box in a dead corner)? — all moves;
- *moves*: from a solvable s, does a keep it solvable (safe) or lose it (fatal)? — the moves from solvable states.

    python scripts/sokoban_dead_ends.py --runs runs/sokoban-seeds/seed0 runs/sokoban-seeds/seed1 runs/sokoban-seeds/seed2

Reads each run's `iter_1/prm` (Q1), its eval levels (`tasks/eval`) and the episodes of one eval row (`--row`, default
greedy π1: `evals/pi1.parquet`). Each run's AUCs are its own critic's; over runs they are averaged, with a bootstrap
over episodes within each run (seeded). Writes --json if given.
"""
from __future__ import annotations

import argparse
import random
from functools import lru_cache
from pathlib import Path

from agentprm.agent.replay import episode_states
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.sokoban import MOVES, move, parse_level, solve
from agentprm.io import provenance, write_json
from agentprm.prm.loading import load_prm
from agentprm.prm.metrics import auc


def labelled_moves(run: Path, row: str) -> list[tuple[str, float, bool, bool]]:
    """(episode id, Q1(s, a), s solvable, s' solvable) for every move of the row's episodes."""
    levels = {t.task_id: parse_level(t.game) for t in load_tasks(run / "tasks" / "eval")}
    prm = load_prm(run / "iter_1" / "prm")
    out = []
    for episode in iter_episodes(read_trajectories(run / "evals" / f"{row}.parquet")):
        level = levels[episode.task_id]
        solvable = lru_cache(maxsize=None)(lambda boxes, player, lv=level: solve(lv, boxes, player) is not None)
        pairs = list(episode_states(episode))
        scores = prm.score([s for s, _ in pairs], [a for _, a in pairs]).tolist()
        boxes, player = level.boxes, level.player
        for (_, action), q in zip(pairs, scores):
            after = move(level, boxes, player, action) if action in MOVES else None
            nxt = after or (boxes, player)
            out.append((episode.episode_id, q, solvable(boxes, player), solvable(*nxt)))
            boxes, player = nxt
    return out


def aucs(moves: list) -> dict:
    """The two AUCs of a list of labelled moves (module docstring), with their counts."""
    live, lost = [q for _, q, s, _ in moves if s], [q for _, q, s, _ in moves if not s]
    safe = [q for _, q, s, t in moves if s and t]
    fatal = [q for _, q, s, t in moves if s and not t]
    return {"states_auc": auc(live, lost) if live and lost else None, "solvable": len(live), "lost": len(lost),
            "moves_auc": auc(safe, fatal) if safe and fatal else None, "safe": len(safe), "fatal": len(fatal)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, nargs="+", required=True, help="Sokoban loop run folders (one per seed)")
    p.add_argument("--row", default="pi1", help="the eval row whose episodes are labelled (default pi1: greedy π1)")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples over episodes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    per_run, episodes = {}, {}
    for run in a.runs:
        got = labelled_moves(run, a.row)
        per_run[str(run)] = aucs(got)
        episodes[run] = {}
        for m in got:
            episodes[run].setdefault(m[0], []).append(m)
        print(f"{run}: {per_run[str(run)]}")
    # each run has its own critic, whose scores are on its own scale: AUCs are per run, then averaged; the bootstrap
    # resamples episodes within each run
    rng, boots, keys = random.Random(a.seed), {"states": [], "moves": []}, ("states", "moves")
    for _ in range(a.boot):
        found = [aucs([m for e in rng.choices(list(eps), k=len(eps)) for m in eps[e]]) for eps in episodes.values()]
        for k in keys:
            if all(f[f"{k}_auc"] is not None for f in found):
                boots[k].append(sum(f[f"{k}_auc"] for f in found) / len(found))
    pooled = {}
    for k in keys:
        values = [r[f"{k}_auc"] for r in per_run.values()]
        pooled[f"{k}_auc"] = sum(values) / len(values) if None not in values else None
        ci = sorted(boots[k])   # empty where some run holds no lost state (or no fatal move) to compare with
        pooled[f"{k}_ci95"] = [ci[int(0.025 * len(ci))], ci[int(0.975 * len(ci)) - 1]] if ci else None
    for count in ("solvable", "lost", "safe", "fatal"):
        pooled[count] = sum(r[count] for r in per_run.values())
    cell = {k: (f"{pooled[f'{k}_auc']:.3f} [{pooled[f'{k}_ci95'][0]:.3f}, {pooled[f'{k}_ci95'][1]:.3f}]"
                if pooled[f"{k}_ci95"] and pooled[f"{k}_auc"] is not None else "n/a") for k in keys}
    print(f"mean of {len(a.runs)} runs (a uniform critic: 0.5): states AUC {cell['states']} ({pooled['solvable']} "
          f"solvable, {pooled['lost']} lost); moves AUC {cell['moves']} ({pooled['safe']} safe, {pooled['fatal']} fatal)")
    if a.json:
        write_json(a.json, {"row": a.row, "per_run": per_run, "pooled": pooled,
                            "provenance": provenance({k: str(v) for k, v in vars(a).items()}, a.seed)})


if __name__ == "__main__":
    main()
