"""The pooling behind docs/results.md: episodes pooled across seeds, Wilson CI, per-seed rates kept."""
import importlib.util
from pathlib import Path

import pytest

from agentprm.eval.summary import pooled_rows

spec = importlib.util.spec_from_file_location("paper_table", Path(__file__).parents[1] / "scripts" / "paper_table.py")
paper_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paper_table)


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
    md = paper_table.markdown(list(rows.values()), [0, 1], "c.yaml")
    assert "| pi0 | 1 | 37.5 |" in md and "64.9" in md
    assert "91.0" not in md   # the paper's only Best-of-N number is Best-of-16 on π3, not a π1 row
    md3 = paper_table.markdown([{**rows[("pi1", 4)], "policy": "pi3", "best_of_n": 16}], [0, 1], "c.yaml")
    assert md3.rstrip().endswith("| 91.0 |")
