"""The pooling behind docs/results.md: episodes pooled across seeds, Wilson CI, per-seed rates kept; the sweep's
table with the paper's numbers beside matching rows."""
import pytest

from agentprm.data.summary import pooled_rows, rate_cells
from agentprm.loop.sweep import sweep_markdown


def _markdown(rows):
    return sweep_markdown("c.yaml", [0, 1], {"": {"rows": rows, "wall_seconds": 0.0, "own_seconds": 0.0}}, paper=[""])


def test_pooled_rows_pool_episodes_and_keep_seeds():
    row = lambda p, it, n, rate, eps: {"policy": p, "iteration": it, "best_of_n": n, "success_rate": rate,
                                        "episodes": eps}
    per_seed = {0: [row("pi0", 0, 1, 0.25, 20), row("pi1", 1, 4, 0.5, 20)],
                1: [row("pi0", 0, 1, 0.5, 20), row("pi1", 1, 4, 0.75, 20)]}
    rows = {(r["policy"], r["best_of_n"]): r for r in pooled_rows(per_seed)}
    pi0 = rows[("pi0", 1)]
    assert pi0["episodes"] == 40 and pi0["success_rate"] == pytest.approx(15 / 40)
    assert pi0["ci95"][0] < 15 / 40 < pi0["ci95"][1] and pi0["per_seed"] == {0: 0.25, 1: 0.5}
    assert rows[("pi1", 4)]["success_rate"] == pytest.approx(25 / 40)
    md = _markdown(list(rows.values()))
    assert "| — | pi0 | greedy |  |  | 37.5 |" in md and "| 25, 50 | 64.9 |" in md   # (no env steps, no KL recorded)
    assert "91.0" not in md   # the paper's only Best-of-N number is Best-of-16 on π3, not a π1 row
    md3 = _markdown([{**rows[("pi1", 4)], "policy": "pi3", "best_of_n": 16}])
    assert md3.rstrip().endswith("| 91.0 | 0 | 0 |")


def test_pooled_rows_group_by_any_key_fields():
    """pi0_study pools runs per demo size: same pooling, other key."""
    row = lambda size, rate: {"size": size, "success_rate": rate, "episodes": 4}
    per_seed = {0: [row(120, 0.5), row(480, 1.0)], 1: [row(120, 0.25), row(480, 0.75)]}
    rows = pooled_rows(per_seed, key=("size",))
    assert [(r["size"], r["success_rate"], r["episodes"]) for r in rows] == [(120, 3 / 8, 8), (480, 7 / 8, 8)]
    assert set(rows[0]) == {"size", "success_rate", "ci95", "episodes", "per_seed"}
    assert rate_cells(rows[1]).startswith("87.5 | [")


def test_paper_numbers_only_beside_agentprm_variants():
    row = {"policy": "pi0", "iteration": 0, "best_of_n": 1, "success_rate": 0.5, "ci95": [0.2, 0.8], "episodes": 4,
           "per_seed": {0: 0.5}}
    done = {"rows": [row], "wall_seconds": 0.0, "own_seconds": 0.0}
    md = sweep_markdown("s.yaml", [0], {"agentprm": done, "grpo": done}, paper=["agentprm"])
    assert "| agentprm | pi0 | greedy |  |  | 50.0 | [20.0, 80.0] | 4 | 50 | 64.9 |" in md
    assert "| grpo | pi0 | greedy |  |  | 50.0 | [20.0, 80.0] | 4 | 50 |  |" in md
