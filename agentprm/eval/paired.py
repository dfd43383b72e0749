"""Paired differences between two policies evaluated on the same tasks, with a bootstrap CI that resamples tasks.

A claim "A beats B" is about the same eval tasks played by both: most of the variance of two success rates is in
which tasks are easy, and it cancels in the per-task difference. So the difference is

    Δ = Σ_t w_t (rate_A(t) − rate_B(t)) / Σ_t w_t,     w_t = episodes of task t (equal for A and B),

and its 95% CI comes from a paired bootstrap: in each of `resamples` draws every seed's tasks are resampled with
replacement (seeds are strata: each seed keeps its own task count), and Δ is recomputed on the draw; the CI is
the 2.5 and 97.5 percentiles. Seeds that played the *same* tasks (one eval set for every seed) share their draw: a
task is in or out for all of them at once, since a task easy for A on one seed is easy on the others — resampled
per seed, the seeds would count as independent games and the CI would shrink by up to √seeds with no new game.
Outcomes are per task, as `{seed: {task_id: (wins, episodes)}}` — the `per_task` field of an eval summary
(data/summary.py).

That CI holds the seeds fixed: it says what other *games* would give for these trained policies. A claim about a
training method must also cover other *training runs*, whose variance the task bootstrap never sees (two methods
+1, −5, −5 points apart on three seeds). `hierarchical=True` resamples both levels, seeds then tasks within each
drawn seed (the two-stage bootstrap of Davison & Hinkley 1997, §3.8): each draw picks as many seeds as there are,
with replacement, and for each picked seed resamples its tasks; seeds that played one task set share that draw of
it, as above. With one seed it is the task bootstrap. tests/test_paired.py measures its coverage on synthetic data
with a known seed effect, beside the task bootstrap's.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from agentprm.data.summary import row_key

PerTask = Mapping[str, "tuple[int, int] | list[int]"]
RESAMPLES = 10_000


def paired_difference(a: Mapping[int, PerTask], b: Mapping[int, PerTask], resamples: int = RESAMPLES,
                      seed: int = 0, hierarchical: bool = False) -> dict:
    """Δ = success(A) − success(B) over the tasks both played, per seed stratum; {"delta", "ci95", "episodes",
    "tasks", "seeds", "bootstrap"}. `hierarchical`: resample seeds, then tasks within them (module docstring).
    Raises ValueError when a seed or task of one side is missing from the other."""
    if set(a) != set(b):
        raise ValueError(f"paired comparison needs the same seeds on both sides (got {sorted(a)} vs {sorted(b)})")
    diffs, weights, task_sets = [], [], []
    for s in sorted(a):
        if set(a[s]) != set(b[s]):
            only = sorted(set(a[s]) ^ set(b[s]))
            raise ValueError(f"seed {s}: paired comparison needs the same eval tasks on both sides ({only[0]!r} "
                             f"is on one side only)")
        tasks = sorted(a[s])
        wa, na = np.array([a[s][t][0] for t in tasks], float), np.array([a[s][t][1] for t in tasks], float)
        wb, nb = np.array([b[s][t][0] for t in tasks], float), np.array([b[s][t][1] for t in tasks], float)
        if (na < 1).any() or (nb < 1).any():
            raise ValueError(f"seed {s}: a task with no episodes")
        diffs.append(wa / na - wb / nb)
        weights.append((na + nb) / 2)
        task_sets.append(tuple(tasks))
    total = sum(w.sum() for w in weights)
    delta = float(sum((w * d).sum() for w, d in zip(weights, diffs)) / total)
    rng = np.random.default_rng(seed)
    draws: dict[tuple, np.ndarray] = {}   # one draw per task set: seeds on the same tasks resample them together
    for tasks in task_sets:
        if tasks not in draws:
            draws[tasks] = rng.integers(0, len(tasks), size=(resamples, len(tasks)))
    # each seed's weighted sums on every draw of its tasks: (resamples,) numerator and denominator
    num_s = np.stack([(w[draws[t]] * d[draws[t]]).sum(1) for t, d, w in zip(task_sets, diffs, weights)])
    den_s = np.stack([w[draws[t]].sum(1) for t, w in zip(task_sets, weights)])
    if hierarchical and len(diffs) > 1:   # seeds drawn with replacement, then their tasks
        picks = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
        cols = np.arange(resamples)[:, None]
        num, den = num_s[picks, cols].sum(1), den_s[picks, cols].sum(1)
    else:
        num, den = num_s.sum(0), den_s.sum(0)
    lo, hi = np.percentile(num / den, [2.5, 97.5])
    episodes = int(sum(sum(v[1] for v in per.values()) for per in a.values()))
    return {"delta": delta, "ci95": [float(lo), float(hi)], "episodes": episodes,
            "tasks": int(sum(len(d) for d in diffs)), "seeds": len(diffs),
            "bootstrap": "seeds, then tasks" if hierarchical and len(diffs) > 1 else "tasks within seeds"}


CONTROL = "-uniform"
"""Suffix of a search row's `search` when the search ran with a uniform critic (`eval.critic_control`)."""
LOGPI = "-logpi"
"""Suffix of a search row's `search` when π's own log π ranked it (`eval.policy_control`): the critic-free control."""
CONTROLS = {CONTROL: "uniform critic", LOGPI: "log π"}
"""Each control's suffix and how a table names it."""


def control_of(r: dict) -> str:
    """Which control row `r` is, by its search's suffix ("-uniform", "-logpi"); "" for a row that is no control."""
    return next((s for s in CONTROLS if r.get("search", "").endswith(s)), "")


def control_search(r: dict, suffix: str = CONTROL) -> str:
    """The `search` value of search row `r`'s control with `suffix` ("bon4-uniform", "beam2x2-logpi")."""
    return (r.get("search") or f"bon{r['best_of_n']}") + suffix


def claimed_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(row, the row it claims to beat) for a loop's rows: π_i vs the π evaluated before it (π_{i-1}, or the last
    evaluated iteration when the loop evaluates every k) and vs π0; every
    Best-of-N or beam row vs its own greedy policy, a beam row also vs Best-of-N with as many samples per turn, and
    a search with Q_i vs the same search with each control that was played (a uniform critic; π_i's own log π)."""
    greedy = {r["iteration"]: r for r in rows if r["best_of_n"] == 1}
    bon = {(r["iteration"], r["best_of_n"]): r for r in rows if r["best_of_n"] > 1 and not r.get("search")}
    controls = {(r["iteration"], r["search"]): r for r in rows if control_of(r)}
    pairs = []
    for r in rows:
        i = r["iteration"]
        if r["best_of_n"] == 1:
            before = max((j for j in greedy if j < i), default=None)
            pairs += [(r, greedy[j]) for j in dict.fromkeys((before, 0)) if i >= 1 and j in greedy]
            continue
        if i in greedy:
            pairs.append((r, greedy[i]))
        if control_of(r):
            continue
        if r.get("search") and (i, r["best_of_n"]) in bon:
            pairs.append((r, bon[i, r["best_of_n"]]))
        pairs += [(r, controls[i, control_search(r, s)]) for s in CONTROLS if (i, control_search(r, s)) in controls]
    return pairs


def search_cell(r: dict) -> str:
    """How a row acts: "greedy", "BoN-4" or "beam 2x2" (samples per turn for the two searches), with
    " (uniform critic)" or " (log π)" for a control row."""
    control = control_of(r)
    search = r.get("search", "").removesuffix(control)
    if search.startswith("beam"):
        cell = search.replace("beam", "beam ")
    else:
        cell = f"BoN-{r['best_of_n']}" if r["best_of_n"] > 1 else "greedy"
    return cell + (f" ({CONTROLS[control]})" if control else "")


def row_name(r: dict) -> str:
    """"pi1", "pi1+bon4", "pi1+beam2x2", "pi1+beam2x2-uniform": how tables name a row."""
    if r.get("search"):
        return f"{r['policy']}+{r['search']}"
    return r["policy"] + (f"+bon{r['best_of_n']}" if r["best_of_n"] > 1 else "")


def comparisons(per_seed_rows: Mapping[int, list[dict]], resamples: int = RESAMPLES,
                hierarchical: bool = True) -> list[dict]:
    """The paired comparisons a loop's rows claim (claimed_pairs), pooled over seeds: rows are matched across seeds
    by (policy, iteration, Best-of-N, search); over several training seeds the CI resamples seeds, then tasks
    (`hierarchical`: a claim about the training, not only about these runs). Rows without per-task outcomes (evals
    written by older versions) are skipped."""
    by_key: dict[tuple, dict[int, dict]] = {}
    for seed, rows in per_seed_rows.items():
        for r in rows:
            by_key.setdefault(row_key(r), {})[seed] = r
    first = next(iter(per_seed_rows.values()), [])
    out = []
    for a, b in claimed_pairs(first):
        ra, rb = by_key[row_key(a)], by_key[row_key(b)]
        if set(ra) != set(rb) or any("per_task" not in r for r in (*ra.values(), *rb.values())):
            continue
        diff = paired_difference({s: r["per_task"] for s, r in ra.items()},
                                 {s: r["per_task"] for s, r in rb.items()}, resamples, hierarchical=hierarchical)
        out.append({"a": row_name(a), "b": row_name(b), "a_best_of_n": a["best_of_n"], "b_best_of_n": b["best_of_n"],
                    **diff})
    return out


def resolved(c: dict) -> bool:
    """Whether a comparison's CI excludes 0."""
    return c["ci95"][0] > 0 or c["ci95"][1] < 0


def delta_cell(c: dict) -> str:
    """"+5.6 [+1.2, +10.1]" in points."""
    lo, hi = c["ci95"]
    return f"{100 * c['delta']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def comparisons_table(comps: list[dict]) -> str:
    """Markdown table of paired comparisons, saying for each whether its CI excludes 0."""
    lines = ["| A | B | Δ success (A − B), points | paired 95% CI | episodes | resolved |", "|---|---|---|---|---|---|"]
    for c in comps:
        lo, hi = c["ci95"]
        lines.append(f"| {c['a']} | {c['b']} | {100 * c['delta']:+.1f} | [{100 * lo:+.1f}, {100 * hi:+.1f}] | "
                     f"{c['episodes']} | {'yes' if resolved(c) else 'no: CI includes 0'} |")
    return "\n".join(lines)
