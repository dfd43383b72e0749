"""The AgentPRM loop end to end at miniature size (killed with SIGKILL mid-run, then --resume), and config errors."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agentprm.cli import main
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.data.summary import wilson_ci
from agentprm.eval.paired import paired_difference, row_name
from agentprm.eval.play import EvalRow


def mini_config(tmp_path: Path, generated_tasks, tiny_policy, **over) -> Path:
    cfg = {"seed": 0, "iterations": 1,
           "tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval)},
           "policy0": {"path": str(tiny_policy)},
           "rollout": {"per_task": 2, "max_steps": 4, "num_envs": 4, "workers": 2},
           "prm": {"epochs": 1}, "policy": {"steps": 2, "batch_size": 4},
           "eval": {"max_steps": 4, "best_of_n": [2], "beam_expand": 1}, **over}
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow   # ~30-50 s: `make test` keeps the in-process resume tests; CI runs this
def test_mini_loop_killed_then_resumed_end_to_end(tmp_path, generated_tasks, tiny_policy):
    cfg, run = mini_config(tmp_path, generated_tasks, tiny_policy), tmp_path / "run"
    cmd = [sys.executable, "-m", "agentprm.cli", "loop", "--config", str(cfg), "--run-dir", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    marker = run / ".stages" / "iter_1__rollouts.done"
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the rollout stage never completed"
    time.sleep(1.0)  # now inside targets/PRM
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    shards_before = {p.name: p.stat().st_mtime_ns for p in (run / "iter_1" / "rollouts").iterdir()}
    assert not (run / "results.json").exists()
    assert (run / ".stages" / "lock.json").exists()   # left by the killed process: stale, taken over on resume

    assert main(["loop", "--config", str(cfg), "--run-dir", str(run), "--resume"]) == 0
    shards_after = {p.name: p.stat().st_mtime_ns for p in (run / "iter_1" / "rollouts").iterdir()}
    assert shards_after == shards_before            # completed stage not redone
    episodes = list(iter_episodes(read_trajectories(run / "iter_1" / "rollouts")))
    assert len(episodes) == 12 and len({e.episode_id for e in episodes}) == 12
    assert not list(run.rglob("*.partial*")) and not (run / ".stages" / "lock.json").exists()
    check_run(run, tiny_policy)
    # a second start without --resume must refuse, losing nothing
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 2


def test_a_rollout_stage_interrupted_mid_way_resumes_with_the_episodes_it_flushed(tmp_path, generated_tasks,
                                                                                   tiny_policy, monkeypatch):
    """the rollouts stage writes shards as it goes, and a resumed stage keeps
    the whole episodes they hold and plays only the others — not the whole stage again."""
    from agentprm.data.trajectories import ShardWriter
    from agentprm.loop import run as loop_run

    class Crash(Exception):
        pass

    cfg, run = mini_config(tmp_path, generated_tasks, tiny_policy), tmp_path / "run"
    monkeypatch.setattr(loop_run, "SHARD_ROWS", 4)          # a shard every episode or two
    add, added = ShardWriter.add, []

    def crashing(self, episode):
        add(self, episode)
        added.append(episode.episode_id)
        if len(added) == 7:
            raise Crash

    monkeypatch.setattr(ShardWriter, "add", crashing)
    with pytest.raises(Crash):
        main(["loop", "--config", str(cfg), "--run-dir", str(run)])
    partial = run / "iter_1" / "rollouts.partial"
    flushed = {e.episode_id: e for e in iter_episodes(read_trajectories(partial))}
    assert 4 <= len(flushed) <= 7 and set(flushed) <= set(added)
    (partial / ".part-00009.parquet.x1y2.tmp").write_bytes(b"a shard a kill cut short")

    monkeypatch.setattr(ShardWriter, "add", add)
    played = []
    real_run = loop_run.run_episodes

    def counting(jobs, *a, **k):
        jobs = list(jobs)
        if k.get("description", "").startswith("rollout-"):
            played.extend(j.episode_id for j in jobs)
        return real_run(jobs, *a, **k)

    monkeypatch.setattr(loop_run, "run_episodes", counting)
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run), "--resume"]) == 0
    episodes = {e.episode_id: e for e in iter_episodes(read_trajectories(run / "iter_1" / "rollouts"))}
    assert len(episodes) == 12 and sorted(played) == sorted(set(episodes) - set(flushed))   # only the missing
    assert all(episodes[i].steps == flushed[i].steps for i in flushed)                     # kept as they were
    assert not list(run.rglob("*.partial*")) and not list(run.rglob(".*.tmp"))
    check_run(run, tiny_policy)


@pytest.mark.slow   # ~30-50 s: `make test` keeps the in-process resume tests; CI runs this
def test_resume_with_more_iterations_extends_a_finished_run(tmp_path, generated_tasks, tiny_policy):
    run = tmp_path / "run"
    one = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0})
    assert main(["loop", "--config", str(one), "--run-dir", str(run)]) == 0
    done = {p.name: p.read_text() for p in (run / ".stages").iterdir()}
    policy1 = (run / "iter_1" / "policy" / "model.safetensors").read_bytes()
    cfg = yaml.safe_load(one.read_text())
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump({**cfg, "iterations": 2}))
    assert main(["loop", "--config", str(two), "--run-dir", str(run), "--resume"]) == 0
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert [(r["policy"], r["iteration"]) for r in rows if r["best_of_n"] == 1] == [("pi0", 0), ("pi1", 1), ("pi2", 2)]
    # iteration 1 was not redone: same markers (their recorded seconds too), same π1 weights
    assert all((run / ".stages" / name).read_text() == text for name, text in done.items())
    assert (run / "iter_1" / "policy" / "model.safetensors").read_bytes() == policy1
    assert json.loads((run / "iter_2" / "policy" / "agentprm.json").read_text())["online_dpo"]["reference"].endswith(
        "iter_1/policy")
    # any other change, or fewer iterations, is refused with the saved config named
    other = tmp_path / "other.yaml"
    for change in ({"iterations": 1}, {"iterations": 2, "seed": 1},
                   {"iterations": 2, "policy0": {**cfg["policy0"], "retrain": True}},
                   {"iterations": 2, "eval": {**cfg["eval"], "bon_temperature": 0.3}}):
        other.write_text(yaml.safe_dump({**cfg, **change}))
        assert main(["loop", "--config", str(other), "--run-dir", str(run), "--resume"]) == 2
    # π0 is loaded, not trained, so its SFT settings (a newer version's defaults) do not stop a resume
    other.write_text(yaml.safe_dump({**cfg, "iterations": 2, "policy0": {**cfg["policy0"], "sft": {"steps": 7}}}))
    assert main(["loop", "--config", str(other), "--run-dir", str(run), "--resume"]) == 0
    # asking for a Best-of-N row a finished run lacks evaluates just that row; nothing trained is redone
    done = {p.name: p.read_text() for p in (run / ".stages").iterdir()}
    other.write_text(yaml.safe_dump({**cfg, "iterations": 2,
                                     "eval": {**cfg["eval"], "best_of_n": [2], "critic_control": False}}))
    assert main(["loop", "--config", str(other), "--run-dir", str(run), "--resume"]) == 0
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert [(r["policy"], r["best_of_n"]) for r in rows] == [("pi0", 1), ("pi1", 1), ("pi1", 2), ("pi2", 1), ("pi2", 2)]
    assert all((run / ".stages" / name).read_text() == text for name, text in done.items())
    # the uniform-critic control of each search: only the control rows are new, each compared with its search
    other.write_text(yaml.safe_dump({**cfg, "iterations": 2,
                                     "eval": {**cfg["eval"], "best_of_n": [2], "critic_control": True}}))
    assert main(["loop", "--config", str(other), "--run-dir", str(run), "--resume"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert [(r["policy"], r["best_of_n"], r.get("search", "")) for r in results["rows"]] == [
        ("pi0", 1, ""), ("pi1", 1, ""), ("pi1", 2, ""), ("pi1", 2, "bon2-uniform"), ("pi2", 1, ""), ("pi2", 2, ""),
        ("pi2", 2, "bon2-uniform")]
    assert all((run / ".stages" / name).read_text() == text for name, text in done.items())
    rate = {row_name(r): r["success_rate"] for r in results["rows"]}
    comps = {(c["a"], c["b"]): c["delta"] for c in results["comparisons"]}
    for i in (1, 2):
        assert comps[f"pi{i}+bon2", f"pi{i}+bon2-uniform"] == pytest.approx(
            rate[f"pi{i}+bon2"] - rate[f"pi{i}+bon2-uniform"])
        assert (f"pi{i}+bon2-uniform", f"pi{i}") in comps
    assert "| pi1 | 1 | BoN-2 (uniform critic) |" in (run / "report.md").read_text()
    # the critic-free control, π_i's own log π in Q_i's place: again only its rows are new, each search compared with
    # it, and its Best-of-2 acts with the sample π finds likeliest (search/policy.py)
    done = {p.name: p.read_text() for p in (run / ".stages").iterdir()}
    other.write_text(yaml.safe_dump({**cfg, "iterations": 2, "eval": {**cfg["eval"], "best_of_n": [2],
                                                                       "critic_control": True, "policy_control": True}}))
    assert main(["loop", "--config", str(other), "--run-dir", str(run), "--resume"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert [r.get("search", "") for r in results["rows"]] == ["", "", "", "bon2-uniform", "bon2-logpi", "", "",
                                                              "bon2-uniform", "bon2-logpi"]
    assert all((run / ".stages" / name).read_text() == text for name, text in done.items())
    rate = {row_name(r): r["success_rate"] for r in results["rows"]}
    comps = {(c["a"], c["b"]): c["delta"] for c in results["comparisons"]}
    for i in (1, 2):
        assert comps[f"pi{i}+bon2", f"pi{i}+bon2-logpi"] == pytest.approx(
            rate[f"pi{i}+bon2"] - rate[f"pi{i}+bon2-logpi"])
        assert (f"pi{i}+bon2-logpi", f"pi{i}") in comps and (f"pi{i}+bon2-logpi", f"pi{i}+bon2-uniform") not in comps
    assert "| pi1 | 1 | BoN-2 (log π) |" in (run / "report.md").read_text()


def check_run(run: Path, tiny_policy: Path) -> None:
    results = json.loads((run / "results.json").read_text())
    rows = results["rows"]
    assert [(r["policy"], r["iteration"], r["best_of_n"], r.get("search")) for r in rows] == [
        ("pi0", 0, 1, None), ("pi1", 1, 1, None), ("pi1", 1, 2, None), ("pi1", 1, 2, "beam2x1"),
        ("pi1", 1, 2, "bon2-uniform"), ("pi1", 1, 2, "beam2x1-uniform")]
    for r in rows:
        assert r["episodes"] == 6 and r["ci95"] == list(wilson_ci(round(r["success_rate"] * 6), 6))
        # every eval's episodes are kept beside its summary: the same outcomes, task by task
        stage = EvalRow(r["policy"], r["iteration"], r["best_of_n"], r.get("search", "")).stage
        kept = list(iter_episodes(read_trajectories(run / "evals" / f"{stage}.parquet")))
        per_task = {}
        for e in kept:
            per_task.setdefault(e.task_id, [0, 0])
            per_task[e.task_id][0] += int(e.won)
            per_task[e.task_id][1] += 1
        assert per_task == r["per_task"], stage
    assert results["wall_seconds"] > 0 and results["config"]["rollout"]["per_task"] == 2
    # paired differences of the rows they claim to beat, on the same 6 eval tasks
    comps = {(c["a"], c["b"]): c for c in results["comparisons"]}
    assert set(comps) == {("pi1", "pi0"), ("pi1+bon2", "pi1"), ("pi1+beam2x1", "pi1"), ("pi1+beam2x1", "pi1+bon2"),
                          ("pi1+bon2", "pi1+bon2-uniform"), ("pi1+beam2x1", "pi1+beam2x1-uniform"),
                          ("pi1+bon2-uniform", "pi1"), ("pi1+beam2x1-uniform", "pi1")}
    for (a, b), c in comps.items():
        ra, rb = (next(r for r in rows if row_name(r) == name) for name in (a, b))
        assert c["delta"] == pytest.approx(ra["success_rate"] - rb["success_rate"]) and c["episodes"] == 6
        assert c["a_best_of_n"] == ra["best_of_n"]
        # the paired bootstrap over the 6 tasks, recomputed from the rows' per-task outcomes
        again = paired_difference({0: ra["per_task"]}, {0: rb["per_task"]})
        assert c["ci95"] == pytest.approx(again["ci95"]) and c["tasks"] == again["tasks"] == 6
    assert "Paired differences" in (run / "report.md").read_text()
    for png in ("success_vs_iteration", "best_of_n", "prm_score_vs_success"):
        assert (run / "plots" / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
    assert "| pi1 | 1 | BoN-2 |" in (run / "report.md").read_text()
    assert "| pi1 | 1 | beam 2x1 |" in (run / "report.md").read_text()
    beam = json.loads((run / "evals" / "pi1_beam2x1.json").read_text())
    assert beam["episodes"] == 6 and beam["policy_samples"] > 0 and beam["env_steps"] >= 6
    assert yaml.safe_load((run / "config.yaml").read_text())["policy0"]["path"] == str(tiny_policy)
    policy_meta = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())
    assert policy_meta["online_dpo"]["reference"].endswith("policy_0")


def test_oracle_critic_with_distinct_samples_drives_the_update(tmp_path, generated_tasks, tiny_policy):
    """policy.critic: oracle ranks the DPO samples by greedy continuations of π0 in the simulator (a bound)."""
    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0},
                      policy={"steps": 2, "batch_size": 4, "critic": "oracle", "distinct": True})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    meta = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())["online_dpo"]
    assert meta["config"]["distinct"] is True
    assert meta["oracle_episodes"] >= 2 * 4          # every state's two distinct samples were played out
    assert all(h["pair_frac"] <= 1.0 for h in meta["history"])


def test_kl_distill_update_in_the_loop(tmp_path, generated_tasks, tiny_policy):
    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0},
                      policy={"steps": 2, "batch_size": 4, "method": "kl-distill", "beta": 0.1, "candidates": 3})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    meta = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())["kl_distill"]
    assert meta["config"]["candidates"] == 3 and meta["reference"].endswith("policy_0")
    assert len(meta["history"]) == 2 and all(h["target_kl"] >= 0 for h in meta["history"])
    before = (run / "policy_0" / "model.safetensors").read_bytes()
    assert (run / "iter_1" / "policy" / "model.safetensors").read_bytes() != before


def test_beam_distill_update_in_the_loop(tmp_path, generated_tasks, tiny_policy):
    """policy.method beam-distill: beam search with (π0, Q1) on the train tasks, its episodes distilled into π1."""
    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0},
                      policy={"steps": 2, "batch_size": 4, "method": "beam-distill", "won_only": False,
                              "search_tasks": 8})
    raw = yaml.safe_load(cfg.read_text())
    raw["tasks"] = {"train": 4, "eval_dir": str(generated_tasks.eval)}      # generated: the search takes 8
    cfg.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    train = sorted(p.name for p in (run / "tasks" / "train").iterdir() if p.is_dir())
    search = sorted(p.name for p in (run / "tasks" / "search").iterdir() if p.is_dir())
    assert len(train) == 4 and len(search) == 8 and set(train) <= set(search)     # the loop's games among them
    meta = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())["beam_distill"]
    assert meta["search"]["episodes"] == 8 and meta["episodes_kept"] == 8
    assert meta["examples"] >= generated_tasks.num and len(meta["history"]) == 2
    before = (run / "policy_0" / "model.safetensors").read_bytes()
    assert (run / "iter_1" / "policy" / "model.safetensors").read_bytes() != before


def test_continuation_targets_give_same_state_alternatives(tmp_path, generated_tasks, tiny_policy):
    """targets.source continuation: π0's top commands at sampled rollout states, each played out by greedy π0."""
    from agentprm.data.tables import read_targets

    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0},
                      targets={"source": "continuation", "continuation_states": 5, "continuation_candidates": 2})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    t = read_targets(run / "iter_1" / "targets.parquet")
    assert t.info["kind"] == "continuation-targets" and t.info["states"] == 5
    assert t.info["continuations"] == t.table.num_rows == 10 and t.info["failed_continuations"] == 0
    keys = t.table["state_key"].to_pylist()
    assert all(keys.count(k) == 2 for k in keys)                 # two different commands at every state
    pairs = {(k, a) for k, a in zip(keys, t.table["action"].to_pylist())}
    assert len(pairs) == 10
    q = t.table["q"].to_numpy()
    assert ((q >= 0) & (q <= 1)).all()
    assert (run / "iter_1" / "prm" / "agentprm.json").exists()   # the PRM trained on them


def test_shaping_mixes_pi0_advantage_into_the_targets(tmp_path, generated_tasks, tiny_policy):
    """targets.shaping_alpha > 0: V^μ (μ = π0) is fitted once, and the iteration's targets are
    (1 − α) Q̂ + α (A^μ + 1) / 2 instead of the plain MC Q̂."""
    import numpy as np

    from agentprm.data.tables import read_targets
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.prm.value import model_values
    from agentprm.targets.mc import targets_from_rollouts
    from agentprm.targets.shaping import shape_targets

    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, targets={"shaping_alpha": 0.5},
                      eval={"max_steps": 4, "best_of_n": [], "beam_width": 0})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 0
    assert (run / "shaping" / "value").is_dir()
    shaped = read_targets(run / "iter_1" / "targets.parquet")
    assert shaped.info["shaping"]["alpha"] == 0.5
    gamma = shaped.info["shaping"]["gamma"]
    assert gamma == yaml.safe_load((run / "config.yaml").read_text())["targets"]["gamma"] == 0.9
    unshaped = targets_from_rollouts(run / "iter_1" / "rollouts", gamma)   # the loop's own γ
    plain, q = unshaped.table["q"].to_numpy(), shaped.table["q"].to_numpy()
    assert len(q) == len(plain) and ((q >= 0) & (q <= 1)).all() and (q != plain).any()
    # recomputed from the saved V^μ: (1 − α) Q̂ + α (A^μ + 1) / 2, row for row
    again = shape_targets(unshaped, model_values(ProcessRewardModel.load(run / "shaping" / "value")), 0.5, gamma,
                          run / "iter_1" / "rollouts").table["q"].to_numpy()
    assert np.allclose(q, again, atol=1e-6)


def test_config_errors_name_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("prm: {lr: fast}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "prm.lr" in capsys.readouterr().err
    bad.write_text("rollout: {per_tasks: 3}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "rollout.per_tasks" in err and len(err.strip().splitlines()) == 1
    bad.write_text("eval: {best_of_n: [1, 4]}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "eval.best_of_n" in capsys.readouterr().err
    bad.write_text("policy: {method: ppo}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "policy.method" in capsys.readouterr().err
    bad.write_text("policy: {critic: banana}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "policy.critic" in capsys.readouterr().err
    bad.write_text("targets: {shaping_alpha: 1.5}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    assert "targets.shaping_alpha" in capsys.readouterr().err
    # enumerated fields and settings the chosen algorithm would ignore: refused before any stage runs
    for text, field in (("rollout: {mode: banana}", "rollout.mode"), ("prm: {loss: nope}", "prm.loss"),
                        ("algo: ppo", "algo"), ("exploration: {reset_frac: 0.5}", "exploration.reset_frac"),
                        ("{algo: grpo, targets: {shaping_alpha: 0.5}}", "targets.shaping_alpha"),
                        ("{algo: sft, hacking: {enabled: true}}", "hacking.enabled"),
                        ("policy: {method: beam-distill, search_width: 0}", "policy.search_width"),
                        ("{policy: {method: beam-distill}, hacking: {enabled: true}}", "policy.method"),
                        ("policy: {search_tasks: 100}", "policy.search_tasks"),
                        ("tasks: {env: nethack}", "tasks.env")):
        bad.write_text(text + "\n")
        assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and f"field '{field}'" in err, (text, err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("config", sorted((Path(__file__).parents[1] / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_configs_load(config):
    from agentprm.loop.algos import get_algorithm
    from agentprm.loop.config import load_config

    cfg = load_config(config)
    assert get_algorithm(cfg.algo) and cfg.iterations >= 1


def test_quickstart_yaml_spells_out_the_quickstart():
    """docs/results.md runs configs/quickstart.yaml over seeds as "the quickstart": keep it equal to what
    `agentprm quickstart` runs — LoopConfig's defaults but for the train/eval task counts and Best-of-N; and
    configs/quickstart-controls.yaml is the same job with the log-π control and Best-of-4 added."""
    import dataclasses

    from agentprm.loop.config import LoopConfig, load_config, quickstart_config

    cfg = load_config(Path(__file__).parents[1] / "configs" / "quickstart.yaml")
    assert cfg == quickstart_config() and (cfg.tasks.train, cfg.tasks.eval, cfg.eval.best_of_n) == (48, 216, [])
    assert cfg.eval.beam_width == 2 and cfg.eval.critic_control and not cfg.eval.policy_control
    default = LoopConfig()
    assert dataclasses.replace(cfg, tasks=default.tasks, eval=dataclasses.replace(cfg.eval, best_of_n=[4])) == default
    controls = load_config(Path(__file__).parents[1] / "configs" / "quickstart-controls.yaml")
    assert controls.eval.policy_control and controls.eval.best_of_n == [4] and dataclasses.replace(
        controls, eval=dataclasses.replace(controls.eval, policy_control=False, best_of_n=[])) == cfg
    assert quickstart_config(seed=3).seed == 3 and LoopConfig().tasks.train == 24   # the defaults are not touched


def test_compare_yaml_is_the_quickstart_on_216_eval_games():
    """docs/results.md reads compare.yaml's agentprm row as the quickstart evaluated on 216 games (its Best-of-N and
    beam rows come from the sweep's search rows): only those fields may differ from LoopConfig()."""
    import dataclasses

    from agentprm.loop.config import LoopConfig, load_config

    cfg, default = load_config(Path(__file__).parents[1] / "configs" / "compare.yaml"), LoopConfig()
    assert cfg.tasks.eval == 216 and cfg.eval.best_of_n == [] and cfg.eval.beam_width == 0
    assert dataclasses.replace(cfg, tasks=default.tasks, eval=default.eval) == default


def test_paper_yaml_is_the_quickstart_with_more_iterations():
    """docs/results.md extends the quickstart seeds' runs to the paper table (--resume, iterations raised)."""
    import dataclasses

    from agentprm.loop.config import LoopConfig, load_config

    paper = load_config(Path(__file__).parents[1] / "configs" / "paper.yaml")
    assert paper.iterations == 2 and dataclasses.replace(paper, iterations=1) == LoopConfig()


def test_stage_reuse_copies_only_named_completed_stages(tmp_path):
    """A sweep runs the stages all its variants share once: a named stage another run completed is copied with
    its recorded seconds (the budget stays charged); others, or ones the source lacks, are built."""
    from agentprm.loop.stages import StageRunner

    def writer(text):
        def build(out: Path) -> None:
            out.mkdir()
            (out / "data.txt").write_text(text)
        return build

    source = StageRunner(tmp_path / "a", resume=False)
    source.run("rollouts", "iter_1/rollouts", writer("from a"))
    source.run("prm", "iter_1/prm", writer("prm of a"))
    first = json.loads(source.marker("rollouts").read_text())
    runner = StageRunner(tmp_path / "b", resume=False, reuse=(tmp_path / "a", {"rollouts", "eval"}))
    out = runner.run("rollouts", "iter_1/rollouts", writer("from b"))
    assert (out / "data.txt").read_text() == "from a" and runner.timings["rollouts"] == first["seconds"]
    assert json.loads(runner.marker("rollouts").read_text())["reused_from"] == str(tmp_path / "a")
    assert (runner.run("prm", "iter_1/prm", writer("prm of b")) / "data.txt").read_text() == "prm of b"
    assert (runner.run("eval", "eval", writer("eval of b")) / "data.txt").read_text() == "eval of b"  # a lacks it


def test_one_writer_per_run_folder(tmp_path):
    """A second process on a run folder is refused while the first lives; a dead holder's lock is taken over."""
    import json as _json

    from agentprm.errors import UserError
    from agentprm.loop.stages import run_lock

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = tmp_path / ".stages" / "lock.json"
        lock.parent.mkdir()
        lock.write_text(_json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        with pytest.raises(UserError, match=f"in use by process {holder.pid}"):
            with run_lock(tmp_path):
                pass
        assert lock.exists()                       # someone else's lock is left alone
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path):                       # its process is gone: stale
        assert _json.loads(lock.read_text())["pid"] == os.getpid()
        with pytest.raises(UserError, match="in use"):   # and a second writer, even in this process, waits
            with run_lock(tmp_path):
                pass
    assert not lock.exists()


def test_a_resumed_stage_reports_the_seconds_of_the_attempts_it_continues(tmp_path):
    """A stage killed after writing shards and resumed with them (keep_partial) reports the first attempt's span —
    its start to its newest shard — plus its own; a stage that starts over reports only its own."""
    import os

    from agentprm.loop.stages import StageRunner

    run = tmp_path / "run"

    def killed(out: Path, stage: str = "iter_1/rollouts") -> None:
        out.mkdir()
        (out / "part-00000.parquet").write_text("shard")
        begun = json.loads(StageRunner(run, resume=True).started(stage).read_text())["started_at"]
        os.utime(out / "part-00000.parquet", (begun + 50, begun + 50))   # as if the attempt ran 50 s
        raise KeyboardInterrupt

    def resumed(out: Path) -> None:
        assert (out / "part-00000.parquet").exists()
        (out / "part-00001.parquet").write_text("shard")

    with pytest.raises(KeyboardInterrupt):
        StageRunner(run, resume=False).run("iter_1/rollouts", "iter_1/rollouts", killed, keep_partial=True)
    runner = StageRunner(run, resume=True)
    runner.run("iter_1/rollouts", "iter_1/rollouts", resumed, keep_partial=True)
    marker = json.loads(runner.marker("iter_1/rollouts").read_text())
    assert marker["carried_seconds"] == pytest.approx(50, abs=0.5)
    assert 50 <= marker["seconds"] < 60 and runner.timings["iter_1/rollouts"] == marker["seconds"]

    with pytest.raises(KeyboardInterrupt):   # the same kill, but the stage cannot continue: nothing carried
        StageRunner(run, resume=True).run("iter_1/targets", "iter_1/targets.parquet",
                                          lambda out: killed(out, "iter_1/targets"))
    StageRunner(run, resume=True).run("iter_1/targets", "iter_1/targets.parquet", lambda out: out.write_text("t"))
    marker = json.loads(runner.marker("iter_1/targets").read_text())
    assert "carried_seconds" not in marker and marker["seconds"] < 5


def test_a_rerun_stage_removes_the_temp_copies_a_kill_left(tmp_path):
    """A kill inside an atomic write (e.g. saving a policy into iter_1/policy.partial) leaves hidden temp copies
    beside the stage output; the rerun removes them, and nothing else in the folder."""
    from agentprm.outputs import atomic_dir
    from agentprm.loop.stages import StageRunner

    run = tmp_path / "run"
    (run / "iter_1").mkdir(parents=True)
    leftovers = [run / "iter_1" / ".policy.partial.k3j2.tmp", run / "iter_1" / ".policy.x9.tmp",
                 run / "iter_1" / ".policy.partial.a1.old"]
    for p in leftovers:
        p.mkdir()
        (p / "model.safetensors").write_bytes(b"0" * 1024)
    mine = run / "iter_1" / ".policy-notes.tmp"           # not ours: a different name
    mine.write_text("keep me")

    def build(out: Path) -> None:
        with atomic_dir(out) as tmp:
            (tmp / "agentprm.json").write_text("{}")

    runner = StageRunner(run, resume=True)
    runner.started("iter_1/policy").write_text("{}")   # what the killed attempt recorded before it wrote anything
    out = runner.run("iter_1/policy", "iter_1/policy", build)
    assert (out / "agentprm.json").exists()
    assert not any(p.exists() for p in leftovers) and mine.read_text() == "keep me"
    assert sorted(p.name for p in (run / "iter_1").iterdir()) == [".policy-notes.tmp", "policy"]


def test_a_broken_eval_game_fails_its_stage_unless_allowed(tmp_path, generated_tasks, tiny_policy, capsys):
    """a game that cannot be played fails the loop's stage (one line, exit 2, not marked complete)
    instead of scoring as an ordinary failure; rollout.max_errors accepts it, and the resume plays on."""
    import shutil

    from agentprm.envs.alfworld.engine import GAME_FILE
    from agentprm.envs.alfworld.tasks import load_tasks

    evals = tmp_path / "eval"
    shutil.copytree(generated_tasks.eval, evals)
    game = Path(load_tasks(evals)[1].game) / GAME_FILE
    game.write_text(game.read_text()[:100])
    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0})
    raw = yaml.safe_load(cfg.read_text())
    raw["tasks"]["eval_dir"] = str(evals)
    cfg.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stage eval_pi0: 1 of 6 episodes hit an env error" in err and "rollout.max_errors" in err
    assert not (run / ".stages" / "eval_pi0.done").exists() and not (run / "evals" / "pi0.json").exists()
    raw["rollout"]["max_errors"] = 1
    cfg.write_text(yaml.safe_dump(raw))
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run), "--resume"]) == 0
    assert json.loads((run / "evals" / "pi0.json").read_text())["errors"] == 1


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_resume_torture_killed_runs_finish_equal_to_an_uninterrupted_one(tmp_path, generated_tasks, tiny_policy):
    """SIGKILL the mini loop at seeded random moments, resume each time; the finished run's results and
    π1's weights equal those of a run never interrupted."""
    import random

    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0})
    clean, tortured = tmp_path / "clean", tmp_path / "tortured"
    start = time.monotonic()
    assert subprocess.run([sys.executable, "-m", "agentprm.cli", "loop", "--config", str(cfg), "--run-dir",
                           str(clean)], capture_output=True).returncode == 0
    wall = time.monotonic() - start                  # kill each attempt somewhere inside a whole run's time
    rng, kills, attempt, scale = random.Random(17), 0, 0, 1.0
    while attempt < 4:
        argv = [sys.executable, "-m", "agentprm.cli", "loop", "--config", str(cfg), "--run-dir", str(tortured)]
        proc = subprocess.Popen(argv + (["--resume"] if attempt else []), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=rng.uniform(0.25, 0.75) * wall * scale)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        attempt += 1
        if (tortured / "results.json").exists():
            if kills or scale < 0.1:
                break
            # finished before its first kill (the clean run, timed cold or under load, was slower): start over and
            # kill sooner, so the test always resumes a killed run
            shutil.rmtree(tortured)
            attempt, scale = 0, scale / 2
    if not (tortured / "results.json").exists():
        assert main(["loop", "--config", str(cfg), "--run-dir", str(tortured), "--resume"]) == 0
    assert kills >= 1
    rows = lambda run: [{k: r[k] for k in ("policy", "best_of_n", "success_rate", "per_task")}  # noqa: E731
                        for r in json.loads((run / "results.json").read_text())["rows"]]
    assert rows(tortured) == rows(clean)
    for weights in ("iter_1/prm/model.safetensors", "iter_1/policy/model.safetensors"):
        assert (tortured / weights).read_bytes() == (clean / weights).read_bytes(), weights
    assert not list(tortured.rglob("*.partial*")) and not list(tortured.rglob(".*.tmp"))


@pytest.mark.slow   # ~60-80 s: run by `make test-all` and CI
def test_a_run_killed_between_its_prm_and_policy_stages_resumes_to_the_same_policy(tmp_path, generated_tasks,
                                                                                   tiny_policy):
    """The kill the resume torture once hit by chance, made deterministic: SIGKILL right after the PRM stage is done,
    so π1 is trained by a fresh process, and it must equal the π1 of a run never interrupted. It failed on a change
    that set torch's thread count to 1 around the rollouts and back: a process whose count was ever set
    computes differently from one left at torch's default, even at the same count."""
    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, eval={"max_steps": 4, "best_of_n": [], "beam_width": 0})
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    loop = [sys.executable, "-m", "agentprm.cli", "loop", "--config", str(cfg), "--run-dir"]
    assert subprocess.run(loop + [str(clean)], capture_output=True).returncode == 0
    proc = subprocess.Popen(loop + [str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    while not (killed / ".stages" / "iter_1__prm.done").exists() and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / ".stages" / "iter_1__policy.done").exists()
    assert subprocess.run(loop + [str(killed), "--resume"], capture_output=True).returncode == 0
    for weights in ("iter_1/prm/model.safetensors", "iter_1/policy/model.safetensors"):
        assert (killed / weights).read_bytes() == (clean / weights).read_bytes(), weights


def loop_in_process_and_served(tmp_path: Path, generated_tasks, tiny_policy, backend: dict | None = None) -> Path:
    """The mini loop with `backend: hf` and with `backend` (default: openai, whatever server agent/serving.py
    starts); checks that every eval row and every rollout of the two are equal, and returns the second run's folder."""
    runs = {}
    for name, section in (("hf", {"backend": "hf"}), ("other", backend or {"backend": "openai"})):
        cfg = mini_config(tmp_path, generated_tasks, tiny_policy, backend=section,
                          eval={"max_steps": 4, "best_of_n": [2], "beam_width": 0, "critic_control": False})
        runs[name] = tmp_path / name
        assert main(["loop", "--config", str(cfg), "--run-dir", str(runs[name])]) == 0
    rows = {b: [(r["policy"], r["best_of_n"], r["per_task"]) for r in json.loads((d / "results.json").read_text())["rows"]]
            for b, d in runs.items()}
    assert rows["hf"] == rows["other"] and len(rows["hf"]) == 3
    acts = {b: {e.episode_id: [s.action for s in e.steps] for e in iter_episodes(read_trajectories(d / "iter_1/rollouts"))}
            for b, d in runs.items()}
    assert acts["hf"] == acts["other"] and not (runs["hf"] / "serve.log").exists()
    return runs["other"]


@pytest.mark.parametrize("text, message", [
    ("iterations: 1\niterations: 2\n", "repeated key 'iterations' at line 2"),
    ("rollout: {per_task: 3, per_task: 4}\n", "repeated key 'per_task' at line 1"),
    ("a: &x [1, 2]\nb: *x\n", "aliases (*name) are not allowed"),
    ("a: &a [\"lol\", \"lol\"]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n", "aliases (*name) are not allowed"),
    ("a: &a [*a]\n", "aliases (*name) are not allowed"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
])
def test_a_config_with_repeated_keys_aliases_or_deep_nesting_is_one_line(tmp_path, text, message):
    """a repeated key silently kept the later value; alias bombs and self-referencing YAML were tracebacks."""
    from agentprm.errors import UserError
    from agentprm.loop.config import load_config

    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(UserError) as e:
        load_config(tmp_path / "c.yaml")
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{tmp_path / 'c.yaml'}: not valid YAML (")
    assert message in str(e.value)


def test_the_decoding_section_loads_and_reaches_the_loops_policies(tmp_path, monkeypatch, capsys):
    """top-k, top-p, stop strings and the token budget are a config section (and `rollout`/`eval` flags)
    that every policy the loop plays with is built with; out-of-range values are refused by name."""
    from agentprm.agent.decoding import Decoding
    from agentprm.loop.config import load_config
    from agentprm.loop.run import Loop

    path = tmp_path / "c.yaml"
    path.write_text('decoding: {top_k: 5, top_p: 0.9, stop: ["\\n", END], max_new_tokens: 12}\n')
    cfg = load_config(path)
    assert cfg.decoding == Decoding(max_new_tokens=12, top_k=5, top_p=0.9, stop=["\n", "END"])
    seen = {}
    monkeypatch.setattr("agentprm.agent.lm.LMAgent.load", classmethod(lambda cls, folder, **kw: seen.update(kw)))
    Loop(cfg, tmp_path / "run").load_agent(tmp_path / "pi", mode="choose", temperature=1.0)
    assert seen == {"decoding": cfg.decoding, "mode": "choose", "temperature": 1.0}
    for text, field in (("decoding: {top_p: 0}", "decoding.top_p"), ("decoding: {top_k: -1}", "decoding.top_k"),
                        ("decoding: {max_new_tokens: 0}", "decoding.max_new_tokens")):
        path.write_text(text + "\n")
        assert main(["loop", "--config", str(path), "--run-dir", str(tmp_path / "r")]) == 2
        assert f"field '{field}'" in capsys.readouterr().err, text
    assert main(["eval", "--policy", "random", "--tasks", str(tmp_path), "--top-p", "1.5"]) == 2
    assert "--top-p" in capsys.readouterr().err


def test_the_quickstart_says_in_words_whether_its_main_claim_held_on_this_seed():
    """The main claim's verdict is read from the run's comparisons: resolved above 0, unresolved, resolved below 0
    (not an effect), or not played; each verdict names the measured distribution over seeds."""
    from agentprm.commands.loop import SEEDS_MEASURED, main_claim

    def claim(delta, lo, hi, a="pi1+beam2x2", b="pi1+beam2x2-uniform"):
        return {"a": a, "b": b, "delta": delta, "ci95": [lo, hi]}

    other = claim(0.2, 0.1, 0.3, a="pi1", b="pi0")
    held = main_claim([other, claim(0.065, 0.028, 0.106)])
    assert "+6.5 [+2.8, +10.6]" in held and "resolved" in held and "NOT" not in held and SEEDS_MEASURED in held
    for missed in (claim(-0.005, -0.046, 0.037), claim(-0.06, -0.1, -0.02)):
        assert "NOT resolved" in main_claim([other, missed])
    assert "not played" in main_claim([other])


@pytest.mark.parametrize("spoil", [b"{not json", b"[1, 2]", b'{"stage": "x"}', b'{"seconds": "fast"}', b"\xff\xfe",
                                   b"[" * 100_000])
def test_a_spoiled_stage_marker_is_a_one_line_error_naming_it(tmp_path, spoil):
    """A resumed run whose .stages/<stage>.done is not what agentprm wrote says so, naming the file, instead of a
    traceback; the stage's output is left as it was."""
    from agentprm.errors import UserError
    from agentprm.loop.stages import StageRunner

    runner = StageRunner(tmp_path / "run", resume=False)
    out = runner.run("rollouts", "rollouts.txt", lambda p: p.write_text("done"))
    runner.marker("rollouts").write_bytes(spoil)
    with pytest.raises(UserError, match=r"rollouts\.done: (not a stage record agentprm wrote|not UTF-8|[0-9,]+ bytes, more)"):
        StageRunner(tmp_path / "run", resume=True).run("rollouts", "rollouts.txt", lambda p: p.write_text("again"))
    assert out.read_text() == "done"
