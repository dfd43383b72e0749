"""The on-policy regime: many iterations of small batches of train tasks drawn afresh from the train split
(`tasks.per_iteration`), evaluated every k iterations (`eval.every`), with the learning curve (success vs env steps and
training seconds) in results.json and report.md — each method in miniature, and a run killed mid-iteration resumed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from agentprm.cli import main
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.eval.drift import DriftReference
from agentprm.eval.paired import claimed_pairs, row_name
from agentprm.loop.run import iteration_tasks, rollout_turns


def pool(n: int) -> list:
    return [SimpleNamespace(task_id=f"t{k:02d}") for k in range(n)]


def ids(tasks) -> list[str]:
    return [t.task_id for t in tasks]


def test_batches_deal_the_pool_in_passes_without_repeats():
    tasks = pool(10)
    batches = [ids(iteration_tasks(tasks, 3, seed=7, i=i)) for i in range(1, 7)]
    assert all(len(b) == len(set(b)) == 3 for b in batches)
    first_pass, second_pass = batches[:3], batches[3:]   # ⌊10 / 3⌋ = 3 batches a pass, one task left out each pass
    for one_pass in (first_pass, second_pass):
        assert len({t for b in one_pass for t in b}) == 9
    assert first_pass != second_pass                     # each pass its own shuffle
    assert batches == [ids(iteration_tasks(list(reversed(tasks)), 3, seed=7, i=i)) for i in range(1, 7)]  # by id
    assert ids(iteration_tasks(tasks, 3, seed=8, i=1)) != batches[0] or ids(iteration_tasks(tasks, 3, 8, 2)) != batches[1]
    assert ids(iteration_tasks(tasks, 0, seed=7, i=5)) == ids(tasks)    # 0: every task every iteration
    assert ids(iteration_tasks(tasks, 10, seed=7, i=5)) == ids(tasks)


def test_a_policy_claims_to_beat_the_last_evaluated_one_and_pi0():
    rows = [{"policy": f"pi{i}", "iteration": i, "best_of_n": 1} for i in (0, 2, 4, 5)]
    pairs = {(row_name(a), row_name(b)) for a, b in claimed_pairs(rows)}
    assert pairs == {("pi2", "pi0"), ("pi4", "pi2"), ("pi4", "pi0"), ("pi5", "pi4"), ("pi5", "pi0")}


def onpolicy_config(tmp_path: Path, generated_tasks, tiny_policy, algo: str, **over) -> Path:
    cfg = {"algo": algo, "seed": 0, "iterations": 3,
           "tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval), "per_iteration": 2},
           "policy0": {"path": str(tiny_policy)},
           "rollout": {"per_task": 2, "max_steps": 3, "num_envs": 4, "workers": 2},
           "prm": {"epochs": 1}, "policy": {"steps": 2, "batch_size": 4},
           "policy_gradient": {"steps": 2, "batch_groups": 2},
           "eval": {"max_steps": 3, "best_of_n": [], "beam_width": 0, "critic_control": False, "every": 2}, **over}
    path = tmp_path / f"{algo}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def check_onpolicy_run(run: Path, num_tasks: int) -> dict:
    results = json.loads((run / "results.json").read_text())
    assert [(r["policy"], r["iteration"]) for r in results["rows"]] == [("pi0", 0), ("pi2", 2), ("pi3", 3)]
    assert not (run / "evals" / "pi1.json").exists()          # iteration 1 trained, not evaluated
    batches = []
    for i in (1, 2, 3):
        episodes = list(iter_episodes(read_trajectories(run / f"iter_{i}" / "rollouts")))
        per_task = Counter(e.task_id for e in episodes)
        assert len(per_task) == 2 and set(per_task.values()) == {2}   # 2 fresh tasks × a group of 2
        batches.append(set(per_task))
    assert len(set().union(*batches)) == num_tasks == 6       # one pass over the 6 train games, no task twice
    curve = results["curve"]
    assert [c["iteration"] for c in curve] == [0, 2, 3]
    steps = [rollout_turns(run / f"iter_{i}" / "rollouts") for i in (1, 2, 3)]
    assert [c["env_steps"] for c in curve] == [0, steps[0] + steps[1], sum(steps)]
    assert curve[0]["train_seconds"] == 0 < curve[1]["train_seconds"] < curve[2]["train_seconds"]
    by_iteration = {r["iteration"]: r for r in results["rows"]}
    assert all(c["success_rate"] == by_iteration[c["iteration"]]["success_rate"] for c in curve)
    # how far each evaluated π_i moved from π0 on π0's eval states, beside its point: re-measured from the folders
    assert curve[0]["kl_to_pi0"] == 0.0 and curve[0]["greedy_agrees_with_pi0"] == 1.0
    last = DriftReference.of(run / "policy_0", run / "evals" / "pi0.parquet").measure(run / "iter_3" / "policy")
    assert curve[2]["kl_to_pi0"] == last["kl_to_pi0"] > 0
    assert {(c["a"], c["b"]) for c in results["comparisons"]} == {("pi2", "pi0"), ("pi3", "pi2"), ("pi3", "pi0")}
    report = (run / "report.md").read_text()
    assert f"| 3 | {sum(steps):,} |" in report and (run / "plots" / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    return results


@pytest.mark.parametrize("algo", ["grpo", pytest.param("gigpo", marks=pytest.mark.slow), "spro", "agentprm",
                                  pytest.param("prime", marks=pytest.mark.slow)])   # ~18 s each
def test_each_method_runs_the_onpolicy_regime(algo, tmp_path, generated_tasks, tiny_policy):
    cfg = onpolicy_config(tmp_path, generated_tasks, tiny_policy, algo)
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    check_onpolicy_run(run, generated_tasks.num)
    meta = json.loads((run / "iter_3" / "policy" / "agentprm.json").read_text())
    if algo == "spro":   # the frozen π0, not π_{i-1}, is SPRO's reference at every iteration
        assert meta["policy_gradient"]["process_reference"].endswith("policy_0")
        assert meta["policy_gradient"]["reference"].endswith("iter_2/policy")


@pytest.mark.slow   # ~1 min: run by `make test-all` and CI
def test_an_onpolicy_run_killed_mid_iteration_resumes_to_the_uninterrupted_result(tmp_path, generated_tasks,
                                                                                  tiny_policy):
    cfg = onpolicy_config(tmp_path, generated_tasks, tiny_policy, "grpo")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(whole)]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "agentprm.cli", "loop", "--config", str(cfg), "--run-dir",
                             str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    marker = killed / ".stages" / "iter_2__rollouts.done"
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), "iteration 2's rollouts never completed"
    os.killpg(proc.pid, signal.SIGKILL)   # inside iteration 2's update, or its eval
    proc.wait()
    assert not (killed / "results.json").exists()
    before = {p: p.stat().st_mtime_ns for p in (killed / "iter_1").rglob("*") if p.is_file()}
    assert main(["loop", "--config", str(cfg), "--run-dir", str(killed), "--resume"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (killed / "iter_1").rglob("*") if p.is_file()} == before
    got, want = (json.loads((r / "results.json").read_text()) for r in (killed, whole))
    assert [r["per_task"] for r in got["rows"]] == [r["per_task"] for r in want["rows"]]
    assert [c["env_steps"] for c in got["curve"]] == [c["env_steps"] for c in want["curve"]]
    check_onpolicy_run(killed, generated_tasks.num)


def test_a_kl_penalty_is_against_the_frozen_pi0_at_every_iteration(tmp_path, generated_tasks, tiny_policy):
    """policy_gradient.kl_coef > 0: the update's reference is policy_0 past iteration 1 too, so iteration 3's first
    logged KL is KL(π2 ‖ π0) — above 0 — where π_old as the reference would log exactly 0 before the first step."""
    cfg = onpolicy_config(tmp_path, generated_tasks, tiny_policy, "grpo",
                          policy_gradient={"steps": 2, "batch_groups": 2, "kl_coef": 0.5, "lr": 3e-3})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    meta = json.loads((run / "iter_3" / "policy" / "agentprm.json").read_text())["policy_gradient"]
    assert meta["kl_reference"].endswith("policy_0") and meta["reference"].endswith("iter_2/policy")
    assert meta["history"][0]["kl_ref"] > 0
    first = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())["policy_gradient"]
    assert first["history"][0]["kl_ref"] == pytest.approx(0.0, abs=1e-9)   # iteration 1: π_old is π0


def test_validation_split_is_a_seeded_draw_disjoint_from_training():
    from agentprm.errors import UserError
    from agentprm.loop.run import validation_split

    tasks = pool(10)
    train, held = validation_split(tasks, 3, seed=4)
    assert len(held) == 3 and len(train) == 7 and not set(ids(held)) & set(ids(train))
    assert set(ids(validation_split(list(reversed(tasks)), 3, seed=4)[1])) == set(ids(held))   # by id, not order
    assert any(ids(validation_split(tasks, 3, seed=s)[1]) != ids(held) for s in (5, 6, 7))
    with pytest.raises(UserError, match="leaves no game to train on"):
        validation_split(tasks, 10, seed=4)


def test_a_tuning_run_evaluates_on_held_out_train_games_it_never_trains_on(tmp_path, generated_tasks, tiny_policy):
    """tasks.validate: every eval (π0's too) plays the held-out train games; no iteration's rollouts touch them, and
    the eval split is never read."""
    cfg = onpolicy_config(tmp_path, generated_tasks, tiny_policy, "grpo", iterations=2,
                          tasks={"train_dir": str(generated_tasks.train), "per_iteration": 2, "validate": 2})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    evaluated = [set(r["per_task"]) for r in results["rows"]]
    trained = {e.task_id for i in (1, 2) for e in iter_episodes(read_trajectories(run / f"iter_{i}" / "rollouts"))}
    assert len(evaluated[0]) == 2 and all(e == evaluated[0] for e in evaluated)
    assert len(trained) == 4 and not trained & evaluated[0]
    assert evaluated[0] <= {t.task_id for t in load_tasks(generated_tasks.train)}   # train games, not eval ones
    assert not (run / "tasks" / "eval").exists()
    assert "held-out train games" in (run / "report.md").read_text()


def test_a_tuning_run_refuses_the_eval_split(tmp_path, generated_tasks, tiny_policy, capsys):
    cfg = onpolicy_config(tmp_path, generated_tasks, tiny_policy, "grpo",
                          tasks={"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval),
                                 "validate": 2})
    assert main(["loop", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    assert "tasks.validate" in capsys.readouterr().err and not (tmp_path / "run").exists()
