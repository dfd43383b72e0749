"""Paired bootstrap over tasks (eval/paired.py): a known difference is recovered, pairing narrows the CI, the CI
covers the truth at about its nominal rate, and a loop's rows yield the comparisons they claim."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentprm.data.summary import per_task, wilson_ci
from agentprm.eval.paired import claimed_pairs, comparisons, paired_difference, resolved


def synthetic(seed: int, tasks: int, p_base: float, lift: float, seeds=(0, 1, 2)):
    """B wins task t with probability p_t (tasks differ a lot in difficulty); A wins whenever B does and also on a
    `lift` share of B's losses: the true difference is lift·(1 − mean p)."""
    rng = np.random.default_rng(seed)
    a, b = {}, {}
    for s in seeds:
        p = np.clip(rng.normal(p_base, 0.3, tasks), 0.02, 0.98)
        won_b = rng.random(tasks) < p
        won_a = won_b | (rng.random(tasks) < lift)
        b[s] = {f"t{k}": (int(won_b[k]), 1) for k in range(tasks)}
        a[s] = {f"t{k}": (int(won_a[k]), 1) for k in range(tasks)}
    return a, b


def test_known_difference_recovered_and_resolved():
    a, b = synthetic(0, 216, 0.65, 0.25, seeds=(0, 1, 2))
    exact = np.mean([a[s][t][0] - b[s][t][0] for s in a for t in a[s]])
    out = paired_difference(a, b, resamples=4000)
    assert out["delta"] == pytest.approx(exact)
    assert out["episodes"] == 648 and out["tasks"] == 648
    lo, hi = out["ci95"]
    assert lo < exact < hi and lo > 0      # ~+9 points on 648 paired episodes: resolved
    assert resolved(out)


def test_no_difference_is_not_resolved():
    a, b = synthetic(1, 216, 0.65, 0.0)
    out = paired_difference(a, b, resamples=2000)
    assert out["delta"] == 0.0 and out["ci95"] == [0.0, 0.0]   # identical outcomes: no spread at all
    a2, _ = synthetic(2, 216, 0.65, 0.0)    # an independent policy of the same strength
    out = paired_difference(a2, b, resamples=2000)
    assert out["ci95"][0] < 0 < out["ci95"][1] and not resolved(out)


def test_pairing_is_narrower_than_unpaired_wilson_intervals():
    a, b = synthetic(3, 216, 0.65, 0.1)
    out = paired_difference(a, b, resamples=4000)
    n = 3 * 216
    wins_a, wins_b = (sum(v[0] for per in side.values() for v in per.values()) for side in (a, b))
    half_unpaired = sum((hi - lo) / 2 for lo, hi in (wilson_ci(wins_a, n), wilson_ci(wins_b, n)))
    assert (out["ci95"][1] - out["ci95"][0]) / 2 < 0.6 * half_unpaired


def test_coverage_near_nominal():
    """Over 60 simulated studies with a known true difference, the 95% CI covers it in most of them."""
    truth, covered = 0.1, 0
    for k in range(60):
        rng = np.random.default_rng(100 + k)
        a, b = {}, {}
        for s in (0, 1):
            won_b = rng.random(150) < 0.6
            flip = rng.random(150)
            # A keeps 90% of B's wins and wins q of B's losses: P(A) − P(B) = 0.4·q − 0.6·0.1 = truth
            won_a = np.where(won_b, flip > 0.1, flip < (truth + 0.06) / 0.4)
            a[s] = {f"t{j}": (int(won_a[j]), 1) for j in range(150)}
            b[s] = {f"t{j}": (int(won_b[j]), 1) for j in range(150)}
        lo, hi = paired_difference(a, b, resamples=1000, seed=k)["ci95"]
        covered += lo <= truth <= hi
    assert covered >= 50   # nominal 57 of 60; a broken interval (e.g. unscaled, or not resampling) lands far off


def test_seeds_on_the_same_tasks_resample_them_together():
    """Three seeds replaying one seed's outcomes on the same 216 tasks are one seed's evidence: the CI is that seed's
    exactly (a task drawn in or out for all seeds at once). The same outcomes on three disjoint task sets are three
    seeds' evidence: the CI narrows by about √3."""
    a1, b1 = synthetic(5, 216, 0.65, 0.1, seeds=(0,))
    one = paired_difference(a1, b1, resamples=4000)
    same = paired_difference({s: a1[0] for s in range(3)}, {s: b1[0] for s in range(3)}, resamples=4000)
    assert same["delta"] == pytest.approx(one["delta"]) and same["ci95"] == pytest.approx(one["ci95"])
    assert same["episodes"] == 3 * 216
    rename = lambda side, s: {f"s{s}-{t}": v for t, v in side[0].items()}  # noqa: E731
    disjoint = paired_difference({s: rename(a1, s) for s in range(3)}, {s: rename(b1, s) for s in range(3)},
                                 resamples=4000)
    width = lambda out: out["ci95"][1] - out["ci95"][0]  # noqa: E731
    assert disjoint["delta"] == pytest.approx(one["delta"])
    assert 1.4 < width(one) / width(disjoint) < 2.1    # √3 ≈ 1.73


def test_mismatched_tasks_are_refused():
    a, b = synthetic(4, 10, 0.5, 0.1, seeds=(0,))
    del b[0]["t3"]
    with pytest.raises(ValueError, match="same eval tasks"):
        paired_difference(a, b)
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference(a, {1: b[0]})


def test_per_task_counts_episodes():
    class E:
        def __init__(self, task_id, won):
            self.task_id, self.won = task_id, won

    assert per_task([E("b", True), E("a", False), E("b", False), E("a", True), E("a", True)]) == {
        "a": [2, 3], "b": [1, 2]}


def _row(policy, iteration, n, wins):
    return {"policy": policy, "iteration": iteration, "best_of_n": n, "success_rate": sum(wins) / len(wins),
            "episodes": len(wins), "ci95": [0, 1], "per_task": {f"t{k}": [w, 1] for k, w in enumerate(wins)}}


def test_loop_rows_give_the_claimed_comparisons():
    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 1, 0, 1]), _row("pi1", 1, 4, [1, 1, 1, 1]),
            _row("pi2", 2, 1, [1, 1, 0, 0])]
    names = [(a["policy"], a["best_of_n"], b["policy"]) for a, b in claimed_pairs(rows)]
    assert names == [("pi1", 1, "pi0"), ("pi1", 4, "pi1"), ("pi2", 1, "pi1"), ("pi2", 1, "pi0")]
    comps = comparisons({0: rows, 1: rows}, resamples=500)
    got = {(c["a"], c["b"]): c["delta"] for c in comps}
    assert got == {("pi1", "pi0"): 0.25, ("pi1+bon4", "pi1"): 0.25, ("pi2", "pi1"): -0.25, ("pi2", "pi0"): 0.0}
    assert all(c["episodes"] == 8 for c in comps)
    old = [{k: v for k, v in r.items() if k != "per_task"} for r in rows]   # evals from before per-task outcomes
    assert comparisons({0: old}) == []


def test_a_beam_row_is_compared_with_its_policy_and_with_best_of_n_at_equal_samples():
    beam = {**_row("pi1", 1, 4, [1, 1, 1, 0]), "search": "beam2x2"}
    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 0, 0, 0]), _row("pi1", 1, 4, [1, 1, 0, 0]), beam,
            {**_row("pi1", 1, 8, [1, 1, 1, 1]), "search": "beam2x4"}]      # no BoN-8 row: compared with π1 only
    got = {(c["a"], c["b"]): c["delta"] for c in comparisons({0: rows}, resamples=200)}
    assert got == {("pi1", "pi0"): -0.25, ("pi1+bon4", "pi1"): 0.25, ("pi1+beam2x2", "pi1"): 0.5,
                   ("pi1+beam2x2", "pi1+bon4"): 0.25, ("pi1+beam2x4", "pi1"): 0.75}


def test_a_search_is_compared_with_its_uniform_critic_control():
    from agentprm.eval.paired import search_cell

    beam, control = ({**_row("pi1", 1, 4, wins), "search": s}
                     for wins, s in (([1, 1, 1, 0], "beam2x2"), ([1, 0, 0, 0], "beam2x2-uniform")))
    bon_control = {**_row("pi1", 1, 4, [0, 0, 1, 0]), "search": "bon4-uniform"}
    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 0, 0, 0]), _row("pi1", 1, 4, [1, 1, 0, 0]),
            beam, bon_control, control]
    got = {(c["a"], c["b"]): c["delta"] for c in comparisons({0: rows}, resamples=200)}
    assert got == {("pi1", "pi0"): -0.25, ("pi1+bon4", "pi1"): 0.25, ("pi1+bon4", "pi1+bon4-uniform"): 0.25,
                   ("pi1+beam2x2", "pi1"): 0.5, ("pi1+beam2x2", "pi1+bon4"): 0.25,
                   ("pi1+beam2x2", "pi1+beam2x2-uniform"): 0.5,
                   ("pi1+bon4-uniform", "pi1"): 0.0, ("pi1+beam2x2-uniform", "pi1"): 0.0}
    assert [search_cell(r) for r in rows[2:]] == ["BoN-4", "beam 2x2", "BoN-4 (uniform critic)",
                                                  "beam 2x2 (uniform critic)"]


def test_a_search_is_compared_with_each_control_played():
    """With π's own log π as a second control (`eval.policy_control`), a search claims to beat both controls; each
    control is compared with its greedy policy only, never with the other control."""
    from agentprm.eval.paired import search_cell

    beam, uniform, logpi = ({**_row("pi1", 1, 4, wins), "search": s} for wins, s in (
        ([1, 1, 1, 0], "beam2x2"), ([1, 0, 0, 0], "beam2x2-uniform"), ([1, 1, 0, 0], "beam2x2-logpi")))
    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 0, 0, 0]), beam, uniform, logpi]
    got = {(c["a"], c["b"]): c["delta"] for c in comparisons({0: rows}, resamples=200)}
    assert got == {("pi1", "pi0"): -0.25, ("pi1+beam2x2", "pi1"): 0.5, ("pi1+beam2x2", "pi1+beam2x2-uniform"): 0.5,
                   ("pi1+beam2x2", "pi1+beam2x2-logpi"): 0.25, ("pi1+beam2x2-uniform", "pi1"): 0.0,
                   ("pi1+beam2x2-logpi", "pi1"): 0.25}
    assert search_cell(logpi) == "beam 2x2 (log π)" and search_cell(uniform) == "beam 2x2 (uniform critic)"


def test_the_printed_table_shows_a_search_against_its_control(capsys, monkeypatch):
    """The quickstart's table: a search row's "Δ vs" is its uniform-critic control when one was played (the PRM's
    share of the gain), and a row without a control keeps its first claim."""
    from agentprm.commands.loop import print_results

    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 0, 0, 0]), _row("pi1", 1, 4, [1, 1, 0, 0]),
            {**_row("pi1", 1, 4, [1, 1, 1, 0]), "search": "beam2x2"},
            {**_row("pi1", 1, 4, [1, 0, 0, 0]), "search": "beam2x2-uniform"}]
    monkeypatch.setenv("COLUMNS", "200")   # one line a row
    print_results(rows, "t", comparisons({0: rows}, resamples=200))
    lines = {line.split("│")[2].strip(): line for line in capsys.readouterr().out.splitlines() if line.count("│") > 8}
    cells = {acts: [c.strip() for c in line.split("│")[5:8]] for acts, line in lines.items()}
    assert cells["beam 2x2"][1] == "pi1+beam2x2-uniform" and cells["beam 2x2"][2].startswith("+50.0 [")
    assert cells["BoN-4"][1] == "pi1" and cells["beam 2x2 (uniform critic)"][1] == "pi1"


def test_the_printed_table_gives_a_search_one_line_per_control(capsys, monkeypatch):
    """Both controls played: the search's row claims against the uniform critic, and the line under it (its own
    cells blank) against π's log π."""
    from agentprm.commands.loop import print_results

    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 0, 0, 0]),
            {**_row("pi1", 1, 4, [1, 1, 1, 0]), "search": "beam2x2"},
            {**_row("pi1", 1, 4, [1, 0, 0, 0]), "search": "beam2x2-uniform"},
            {**_row("pi1", 1, 4, [1, 1, 0, 0]), "search": "beam2x2-logpi"}]
    monkeypatch.setenv("COLUMNS", "200")
    print_results(rows, "t", comparisons({0: rows}, resamples=200))
    lines = [[c.strip() for c in line.split("│")[1:-1]] for line in capsys.readouterr().out.splitlines()
             if line.count("│") > 8]
    at = next(k for k, cells in enumerate(lines) if cells[1] == "beam 2x2")
    assert lines[at][5] == "pi1+beam2x2-uniform" and lines[at][6].startswith("+50.0 [")
    assert lines[at + 1][:5] == [""] * 5 and lines[at + 1][5] == "pi1+beam2x2-logpi"
    assert lines[at + 1][6].startswith("+25.0 [")
    assert lines[at + 3][1] == "beam 2x2 (log π)" and lines[at + 3][5] == "pi1"


def test_sweep_compares_each_variant_with_the_first_on_the_same_tasks():
    from agentprm.loop.sweep import sweep_comparisons

    pi0 = _row("pi0", 0, 1, [1, 0, 0, 1])
    sweep = {"base": {"per_seed": {0: [pi0, _row("pi1", 1, 1, [1, 0, 0, 1])]}},
             "lever": {"per_seed": {0: [pi0, _row("pi1", 1, 1, [1, 1, 1, 1])]}}}
    got = {(c["a"], c["b"]): c["delta"] for c in sweep_comparisons(sweep)}
    assert got == {("base: pi1", "base: pi0"): 0.0, ("lever: pi1", "lever: pi0"): 0.5,
                   ("lever: pi1", "base: pi1"): 0.5}


def test_sweep_claims_each_method_vs_pi0_and_the_baseline_and_search_vs_its_policy():
    from agentprm.loop.sweep import sweep_comparisons

    pi0 = _row("pi0", 0, 1, [1, 0, 0, 0])
    sweep = {"agentprm": {"per_seed": {0: [pi0, _row("pi1", 1, 1, [1, 0, 0, 1]), _row("pi1", 1, 4, [0, 0, 0, 0]),
                                           _row("pi2", 2, 1, [1, 1, 0, 1])]}},
             "grpo": {"per_seed": {0: [pi0, _row("pi1", 1, 1, [1, 1, 0, 0]), _row("pi2", 2, 1, [1, 0, 0, 0])]}}}
    search = {0: [_row("BoN-4", 2, 4, [1, 1, 1, 1]), _row("beam-2x2", 2, 4, [1, 1, 1, 0])]}
    got = {(c["a"], c["b"]): c["delta"] for c in sweep_comparisons(sweep, "grpo", ("agentprm", search))}
    assert got == {
        ("agentprm: pi1", "agentprm: pi0"): 0.25, ("agentprm: pi1+bon4", "agentprm: pi1"): -0.5,
        ("agentprm: pi2", "agentprm: pi1"): 0.25, ("agentprm: pi2", "agentprm: pi0"): 0.5,
        ("grpo: pi1", "grpo: pi0"): 0.25, ("grpo: pi2", "grpo: pi1"): -0.25, ("grpo: pi2", "grpo: pi0"): 0.0,
        ("agentprm: pi1", "grpo: pi1"): 0.0, ("agentprm: pi2", "grpo: pi2"): 0.5,   # each method vs the baseline
        ("BoN-4", "agentprm: pi2"): 0.25, ("beam-2x2", "agentprm: pi2"): 0.0, ("beam-2x2", "BoN-4"): -0.25}


def test_a_log_or_pipe_gets_the_whole_table(capsys, monkeypatch):
    """Piped to a log (80 columns), the table widens itself: the quickstart's log cut the control's name to
    "pi1+beam2x2-un…" at 100 columns."""
    from agentprm.commands.loop import print_results

    rows = [_row("pi0", 0, 1, [1, 0, 0, 1]), _row("pi1", 1, 1, [1, 0, 0, 0]),
            {**_row("pi1", 1, 4, [1, 1, 1, 0]), "search": "beam2x2"},
            {**_row("pi1", 1, 4, [1, 0, 0, 0]), "search": "beam2x2-uniform"}]
    monkeypatch.setenv("COLUMNS", "80")
    print_results(rows, "t", comparisons({0: rows}, resamples=200))
    out = capsys.readouterr().out
    assert "pi1+beam2x2-uniform" in out and "…" not in out


def test_an_eval_row_is_a_typed_record_with_the_run_folders_stage_names():
    """Rows were identified by parsing their stage names (`name.split("_")`); an EvalRow carries the fields the
    report and the paired comparisons key on, and names its stage exactly as the run folders always did (so resumed
    runs find their evals)."""
    from agentprm.data.summary import row_key
    from agentprm.eval.paired import CONTROL
    from agentprm.eval.play import EvalRow

    names = {EvalRow("pi0", 0): "pi0", EvalRow("pi2", 2, 4): "pi2_bon4",
             EvalRow("pi1", 1, 4, "bon4" + CONTROL): "pi1_bon4_uniform", EvalRow("pi1", 1, 4, "beam2x2"): "pi1_beam2x2",
             EvalRow("pi1", 1, 4, "beam2x2" + CONTROL): "pi1_beam2x2_uniform"}
    assert {row: row.stage for row in names} == names
    summary = {"success_rate": 0.5, "ci95": [0.1, 0.9], "episodes": 2, "by_type": {}, "per_task": {"t": [1, 2]}}
    rec = EvalRow("pi1", 1, 4, "beam2x2").record(summary)
    assert row_key(rec) == ("pi1", 1, 4, "beam2x2") and rec["per_task"] == {"t": [1, 2]}
    assert "search" not in EvalRow("pi1", 1).record(summary)   # greedy rows carry no search field, as before


def test_play_eval_refuses_a_search_without_a_critic():
    from agentprm.eval.play import EvalPlay, play_eval

    with pytest.raises(ValueError, match="need a critic"):
        play_eval(object(), [], EvalPlay(), best_of=4)
    with pytest.raises(ValueError, match="need a critic"):
        play_eval(object(), [], EvalPlay(), beam=(2, 2))


def test_paired_rows_pools_sweeps_each_game_set_one_sample(tmp_path, capsys, monkeypatch):
    """scripts/paired_rows.py with --sweep twice: two eval sets of 3 seeds each (every seed of a set on the set's own
    games) pool into one comparison whose Δ and CI are paired_difference's over the (sweep, seed) strata — the same
    numbers as one sweep holding both sets' games, each set's seeds sharing a draw."""
    import importlib.util
    import json
    import re
    import sys
    spec = importlib.util.spec_from_file_location("paired_rows", Path(__file__).resolve().parents[1] / "scripts"
                                                  / "paired_rows.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    sides = {}
    for k, sweep in enumerate(("set1", "set2")):
        a, b = synthetic(10 + k, 216, 0.65, 0.15, seeds=(0,))
        a, b = ({f"{sweep}-{t}": v for t, v in side[0].items()} for side in (a, b))
        for s in range(3):
            for row, per in (("pi1", a), ("pi0", b)):
                out = tmp_path / sweep / "v" / f"seed{s}" / "evals" / f"{row}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps({"per_task": per}))
                sides.setdefault(row, {})[(k, s)] = per
    monkeypatch.setattr(sys, "argv", ["paired_rows.py", "--sweep", str(tmp_path / "set1"), "--sweep",
                                      str(tmp_path / "set2"), "v/pi1:v/pi0", "--tasks-only"])
    script.main()
    printed = capsys.readouterr().out
    want = paired_difference(sides["pi1"], sides["pi0"])
    delta, lo, hi = (float(x) for x in re.search(r": ([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\]", printed).groups())
    assert (delta, lo, hi) == pytest.approx((100 * want["delta"], *(100 * x for x in want["ci95"])), abs=0.051)
    assert "1296 episodes" in printed and printed.count("seeds [0, 1, 2]") == 2
    one = paired_difference({s: sides["pi1"][(0, s)] for s in range(3)}, {s: sides["pi0"][(0, s)] for s in range(3)})
    width = lambda out: out["ci95"][1] - out["ci95"][0]  # noqa: E731
    assert 1.2 < width(one) / width(want) < 1.7    # two game sets, not six: ≈ √2, never √6 ≈ 2.4
    monkeypatch.setattr(sys, "argv", sys.argv[:-1])   # the default: seeds, then tasks
    script.main()
    printed = capsys.readouterr().out
    nested = paired_difference(sides["pi1"], sides["pi0"], hierarchical=True)
    lo, hi = (float(x) for x in re.search(r"\[([+-][\d.]+), ([+-][\d.]+)\]", printed).groups())
    assert (lo, hi) == pytest.approx([100 * x for x in nested["ci95"]], abs=0.051)
    assert "bootstrap: seeds, then tasks" in printed


def test_the_hierarchical_bootstrap_covers_a_method_effect_that_varies_between_training_seeds():
    """Synthetic training runs with a known mean effect: each seed's trained policies differ by Δ_s = Δ + a seed
    effect (sd 0.08), each seed with its own 150 eval games. The task bootstrap answers "other games, these runs" and
    misses Δ far more often than 5%; the hierarchical one (seeds, then tasks) covers it near its nominal 95%."""
    rng = np.random.default_rng(0)
    true, seeds, tasks, trials = 0.05, 5, 150, 200
    covered = {False: 0, True: 0}
    for trial in range(trials):
        a, b = {}, {}
        for s in range(seeds):
            effect = true + rng.normal(0, 0.08)
            base = rng.uniform(0.2, 0.8, tasks)
            pa, pb = np.clip(base + effect / 2, 0, 1), np.clip(base - effect / 2, 0, 1)
            a[s] = {f"s{s}t{t}": (int(rng.random() < pa[t]), 1) for t in range(tasks)}
            b[s] = {f"s{s}t{t}": (int(rng.random() < pb[t]), 1) for t in range(tasks)}
        for hierarchical in covered:
            lo, hi = paired_difference(a, b, resamples=1000, seed=trial, hierarchical=hierarchical)["ci95"]
            covered[hierarchical] += lo <= true <= hi
    assert covered[True] / trials >= 0.88, covered
    assert covered[False] / trials <= 0.80, covered   # the seed variance it cannot see


def test_the_hierarchical_bootstrap_of_one_seed_is_the_task_bootstrap():
    a = {0: {"t1": (1, 1), "t2": (0, 1), "t3": (1, 1)}}
    b = {0: {"t1": (0, 1), "t2": (0, 1), "t3": (1, 1)}}
    flat, nested = paired_difference(a, b, seed=3), paired_difference(a, b, seed=3, hierarchical=True)
    assert flat["ci95"] == nested["ci95"] and nested["bootstrap"] == "tasks within seeds"


def test_the_hierarchical_bootstrap_widens_only_with_disagreeing_seeds():
    """Seeds that agree exactly: resampling them changes nothing beyond the tasks. Seeds at +1 and −1 point apart
    on every task: the seed level alone spans the range."""
    same = {s: {f"t{t}": (t % 2, 1) for t in range(40)} for s in range(4)}
    none = {s: {f"t{t}": (0, 1) for t in range(40)} for s in range(4)}
    ci = paired_difference(same, none, seed=1, hierarchical=True)["ci95"]
    assert ci[0] > 0.3 and ci[1] < 0.7
    split_a = {s: {f"s{s}t{t}": (int(s < 2), 1) for t in range(40)} for s in range(4)}
    split_b = {s: {f"s{s}t{t}": (int(s >= 2), 1) for t in range(40)} for s in range(4)}
    flat = paired_difference(split_a, split_b, seed=1)["ci95"]
    nested = paired_difference(split_a, split_b, seed=1, hierarchical=True)["ci95"]
    assert flat == [0.0, 0.0] and nested[0] <= -0.5 and nested[1] >= 0.5
