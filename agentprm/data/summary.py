"""Success rate with a Wilson 95% interval, overall and per task type, plus a rich table."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentprm.errors import UserError


def wilson_ci(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval: sane at 0 and n successes, unlike the normal approximation."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def rate(wins: int, n: int) -> dict:
    """A success rate with its Wilson 95% CI, the fields every summary and results row carries."""
    return {"success_rate": wins / n if n else 0.0, "ci95": list(wilson_ci(wins, n)), "episodes": n}


def _rate(episodes: Sequence) -> dict:
    wins = sum(e.won for e in episodes)
    n = len(episodes)
    return {**rate(wins, n), "successes": wins, "mean_turns": sum(len(e.steps) for e in episodes) / n if n else 0.0,
            # the episode's summed reward: success where the only reward is the win (ALFWorld, Sokoban), the
            # partial credit reached where an env scores progress (ScienceWorld: final score / 100)
            "mean_return": sum(s.reward for e in episodes for s in e.steps) / n if n else 0.0,
            "errors": sum(bool(e.error) for e in episodes)}


def summarize(episodes: Sequence) -> dict:
    """episodes: records with `.won`, `.steps`, `.task_type`, `.error`."""
    by_type = defaultdict(list)
    for e in episodes:
        by_type[e.task_type].append(e)
    out = _rate(episodes)
    out["by_type"] = {t: _rate(eps) for t, eps in sorted(by_type.items())}
    out["per_task"] = per_task(episodes)
    return out


def restricted(summary: dict, task_ids: Sequence[str]) -> dict:
    """A summary's success rate, CI and `per_task` over some of its tasks (e.g. the subset a costlier search
    played), so that a row and its restriction pair over the same tasks."""
    per = {t: summary["per_task"][t] for t in task_ids}
    return {**rate(sum(w for w, _ in per.values()), sum(n for _, n in per.values())), "per_task": per}


def check_env_errors(episodes: Sequence, max_errors: int, where: str, accept: str) -> None:
    """Broken input is loud: a UserError when more than `max_errors` episodes hit an env error (a broken game, a lost
    worker), naming the first; `accept` says how to let them through (e.g. "--max-errors 3")."""
    failed = [e for e in episodes if e.error]
    if len(failed) > max_errors:
        raise UserError(f"{where}{len(failed)} of {len(episodes)} episodes hit an env error, counted as failures "
                        f"(first: {failed[0].task_id}: {failed[0].error.splitlines()[0][:200]}); fix the game or "
                        f"{accept.format(n=len(failed))} to accept them")


def per_task(episodes: Sequence) -> dict[str, list[int]]:
    """task id -> [wins, episodes]: what paired comparisons (eval/paired.py) match two policies' evals on."""
    out: dict[str, list[int]] = {}
    for e in sorted(episodes, key=lambda e: e.task_id):
        wins_n = out.setdefault(e.task_id, [0, 0])
        wins_n[0] += int(bool(e.won))
        wins_n[1] += 1
    return out


RESULT_KEY = ("policy", "iteration", "best_of_n", "search")  # what identifies a row of a loop's results.json


def row_key(r: dict) -> tuple:
    """A results row's RESULT_KEY values; `search` is "" for greedy and Best-of-N rows ("beam2x2" for beam search),
    and absent from rows written before beam rows existed."""
    return tuple(r.get(k, "") for k in RESULT_KEY)


def pooled_rows(per_seed: dict[int, list[dict]], key: Sequence[str] = RESULT_KEY) -> list[dict]:
    """Rows (`success_rate`, `episodes`) of several seeds' runs pooled per value of the `key` fields (default: a
    results row's policy, iteration, Best-of-N): episodes added up, Wilson CI over all of them, and each seed's own
    rate kept (`per_seed`). Groups come in the order they first appear; a key field a row lacks counts as ""."""
    groups: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
    for seed, rows in sorted(per_seed.items()):
        for r in rows:
            groups[tuple(r.get(k, "") for k in key)].append((seed, r))
    out = []
    for values, items in groups.items():
        wins = sum(round(r["success_rate"] * r["episodes"]) for _, r in items)
        n = sum(r["episodes"] for _, r in items)
        out.append({**dict(zip(key, values)), **rate(wins, n),
                    "per_seed": {seed: r["success_rate"] for seed, r in items}})
    return out


def rate_cells(r: dict) -> str:
    """Markdown cells "success % | [CI low, high] | episodes" of a summary or results row."""
    lo, hi = r["ci95"]
    return f"{100 * r['success_rate']:.1f} | [{100 * lo:.1f}, {100 * hi:.1f}] | {r['episodes']}"


def per_seed_cell(r: dict) -> str:
    """A pooled row's per-seed success rates, in percent: "64, 61, 69"."""
    return ", ".join(f"{100 * v:.0f}" for v in r["per_seed"].values())


def print_table(summary: dict, title: str = "") -> None:
    """Success per task type and overall; a `mean return` column where episodes earn more than their win (partial
    credit: ScienceWorld), and an `errors` column (episodes whose env failed: a broken game, a lost worker — counted
    as failures above) whenever there are any."""
    table = Table(title=escape(title))   # a path's '[...]' is text, not rich markup
    errors = bool(summary.get("errors"))
    partial = abs(summary.get("mean_return", summary["success_rate"]) - summary["success_rate"]) > 1e-9
    for col in (("task type", "episodes", "success", "95% CI", "mean turns") + (("mean return",) if partial else ())
                + (("errors",) if errors else ())):
        table.add_column(col, justify="left" if col == "task type" else "right")
    rows = list(summary["by_type"].items()) + [("all", summary)]
    for name, r in rows:
        table.add_row(name, str(r["episodes"]), f"{100 * r['success_rate']:.1f}%",
                      f"[{100 * r['ci95'][0]:.1f}, {100 * r['ci95'][1]:.1f}]", f"{r['mean_turns']:.1f}",
                      *((f"{r['mean_return']:.3f}",) if partial else ()),
                      *((str(r.get("errors", "?")),) if errors else ()))
    Console().print(table)
