"""scripts/dpo_pairs.py and the update's pair rule it reuses: pairs formed as online DPO forms them (best and worst
of a state's distinct samples, ties and single replies give none), the chosen reply's agreement with π0's order,
the pooled share with its CI, and the script end to end on a finished mini loop run."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from agentprm.policy.online_dpo import preference_pairs

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dpo_pairs.py"
_spec = importlib.util.spec_from_file_location("dpo_pairs", SCRIPT)
dpo_pairs = sys.modules["dpo_pairs"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dpo_pairs)


class TableCritic:
    """Scores a reply by a fixed table, whatever the state."""

    def __init__(self, table: dict[str, float]):
        self.table, self.calls = table, []

    def score(self, states, replies) -> torch.Tensor:
        self.calls.append(list(replies))
        return torch.tensor([self.table[r] for r in replies])


def test_pairs_are_the_best_and_worst_distinct_replies_and_ties_give_none():
    critic = TableCritic({"a": 0.9, "b": 0.1, "c": 0.5, "d": 0.5, "e": 0.5, "f": 0.2})
    samples = [["b", "a", "b"], ["c", "c"], ["d", "e"], ["f", "a"]]
    pairs, margins, q = preference_pairs(critic, [None] * 4, samples, 0.0)
    assert pairs == [(0, "a", "b"), (3, "a", "f")]
    assert margins == pytest.approx([0.8, 0.7])
    assert critic.calls == [["b", "a", "c", "d", "e", "f", "a"]]   # each state's distinct replies, scored once
    assert len(q) == 7
    pairs, _, _ = preference_pairs(critic, [None] * 4, samples, 0.75)   # the margin filters the weaker pair
    assert pairs == [(0, "a", "b")]


def test_agreement_is_whether_the_chosen_reply_is_the_one_pi0_prefers():
    logp = {(0, "a"): -1.0, (0, "b"): -2.0, (1, "c"): -0.5, (1, "d"): -0.5}
    assert dpo_pairs.agreement([(0, "a", "b"), (0, "b", "a"), (1, "c", "d")], logp) == [(0, True), (0, False),
                                                                                         (1, False)]


def test_the_share_pools_runs_and_its_ci_brackets_it():
    share, lo, hi = dpo_pairs.share_ci([[(0, True), (1, False)], [(0, True), (0, True)]], resamples=500)
    assert share == 0.75 and 0.0 <= lo <= share <= hi <= 1.0 and hi - lo > 0
    assert dpo_pairs.share_ci([[(0, True)], [(3, True)]], resamples=50) == (1.0, 1.0, 1.0)


def test_a_run_without_a_prm_is_refused_before_work(tmp_path):
    (tmp_path / "config.yaml").write_text("{}")
    with pytest.raises(SystemExit, match="no policy_0"):
        dpo_pairs.main(["--runs", str(tmp_path)])


@pytest.mark.slow   # a mini loop (~40 s): `make test-all` and CI
def test_the_script_measures_a_finished_run(tmp_path, generated_tasks, tiny_policy):
    from agentprm.cli import main

    cfg = {"seed": 0, "iterations": 1,
           "tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval)},
           "policy0": {"path": str(tiny_policy)},
           "rollout": {"per_task": 2, "max_steps": 4, "num_envs": 4, "workers": 2},
           "prm": {"epochs": 1}, "policy": {"steps": 2, "batch_size": 4, "temperature": 1.5},
           "eval": {"max_steps": 4, "best_of_n": [], "beam_width": 0}}
    (tmp_path / "loop.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "variant" / "seed0"
    assert main(["loop", "--config", str(tmp_path / "loop.yaml"), "--run-dir", str(run)]) == 0
    assert dpo_pairs.main(["--runs", str(run), "--states", "30", "--json", str(tmp_path / "pairs.json")]) == 0
    found = json.loads((tmp_path / "pairs.json").read_text())
    measured = found["runs"][0]
    assert measured["states"] <= 30 and measured["differing"] > 0
    assert len(measured["uniform"]) == measured["differing"]   # random scores never tie: a pair per differing state
    assert len(measured["q1"]) <= measured["differing"]
    assert {row["group"] for row in found["table"]} == {"variant"}
    assert all(i < measured["states"] for i, _ in measured["q1"] + measured["uniform"])
