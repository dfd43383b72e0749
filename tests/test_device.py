"""Device and precision (models/device.py): one DeviceConfig for every command and the loop; a missing GPU
is a one-line error before any work; bfloat16 runs end to end on the CPU (the CUDA path runs in bench/gpu_check.sh)."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from agentprm.cli import main
from agentprm.models.device import DeviceConfig, place, use_device


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["eval", "sft", "train-prm", "rollout"])
def test_asking_for_cuda_without_one_is_a_one_line_error_before_work(command, tmp_path, capsys):
    argv = {"eval": ["--policy", "random", "--tasks", str(tmp_path)],
            "sft": ["--demos", str(tmp_path / "d.parquet"), "--out", str(tmp_path / "o")],
            "train-prm": ["--targets", str(tmp_path / "t.parquet"), "--init", "tiny", "--out", str(tmp_path / "o")],
            "rollout": ["--policy", "random", "--tasks", str(tmp_path), "--out", str(tmp_path / "o")]}[command]
    assert main([command, *argv, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "torch sees no CUDA device" in err
    assert not (tmp_path / "o").exists()


def test_bad_device_fields_are_refused(tmp_path, capsys):
    assert main(["eval", "--policy", "random", "--tasks", str(tmp_path), "--device", "gpu0"]) == 2
    assert "field 'device'" in capsys.readouterr().err
    bad = tmp_path / "c.yaml"
    bad.write_text("device: {dtype: float8}\n")
    assert main(["loop", "--config", str(bad), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "section 'device'" in err and "field 'dtype'" in err and len(err.strip().splitlines()) == 1


def test_placement_resolves_auto_and_places_models():
    device, dtype = use_device(DeviceConfig())
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert dtype is (torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32)
    use_device(DeviceConfig(device="cpu", dtype="bfloat16"))
    assert next(place(torch.nn.Linear(2, 2)).parameters()).dtype is torch.bfloat16


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_a_bfloat16_loop_runs_end_to_end_on_the_cpu(tmp_path, generated_tasks, tiny_policy):
    """Every stage (rollouts, PRM, online DPO, Best-of-N, beam) with bfloat16 models: dtypes meet in every loss."""
    cfg = {"seed": 0, "iterations": 1, "device": {"device": "cpu", "dtype": "bfloat16"},
           "tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval)},
           "policy0": {"path": str(tiny_policy)},
           "rollout": {"per_task": 2, "max_steps": 4, "num_envs": 4, "workers": 2},
           "prm": {"epochs": 1}, "policy": {"steps": 2, "batch_size": 4},
           "eval": {"max_steps": 4, "best_of_n": [2], "beam_expand": 1, "critic_control": False}}
    path = tmp_path / "bf16.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(path), "--run-dir", str(run)]) == 0
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert len(rows) == 4 and all(0 <= r["success_rate"] <= 1 for r in rows)
    from safetensors import safe_open

    for folder in ("iter_1/policy", "iter_1/prm"):
        with safe_open(str(run / folder / "model.safetensors"), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}, folder


def test_the_placement_always_sets_torchs_thread_count(monkeypatch):
    """A count never set computes other numbers than the same count set (bench/thread_numerics.py); the rollouts set
    it, so a process that resumes a run after its rollouts must have set it too, or it trains to other weights."""
    from agentprm.models import device

    threads, calls = torch.get_num_threads(), []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    use_device(DeviceConfig())
    assert calls == [threads] and device._threads_chosen is False
    use_device(DeviceConfig(threads=1))
    assert calls == [threads, 1] and device._threads_chosen is True


def test_sharing_cores_gives_torch_the_cores_the_workers_leave_and_restores_it(monkeypatch):
    # (conftest's autouse fixture gives torch's thread count back after)
    from agentprm.models import device

    monkeypatch.setattr(device, "_cores", lambda: 4)
    monkeypatch.setattr(device, "_threads_chosen", False)
    torch.set_num_threads(3)
    with device.sharing_cores(2):
        assert torch.get_num_threads() == 2      # 4 cores - 2 workers
    assert torch.get_num_threads() == 3
    with device.sharing_cores(1):
        assert torch.get_num_threads() == 3      # never more than it had
    with device.sharing_cores(4):
        assert torch.get_num_threads() == 1      # at least one
    with device.sharing_cores(0, 2):
        assert torch.get_num_threads() == 2      # 4 cores between 2 lanes
    with device.sharing_cores(0, 1):
        assert torch.get_num_threads() == 3      # one lane, no workers: untouched
    with pytest.raises(KeyError), device.sharing_cores(8):
        raise KeyError("restored on the way out of an error too")
    assert torch.get_num_threads() == 3
    monkeypatch.setattr(device, "_threads_chosen", True)   # --threads / device.threads: left as chosen
    with device.sharing_cores(4):
        assert torch.get_num_threads() == 3


def test_rollouts_run_the_model_on_the_cores_the_env_workers_leave(monkeypatch):
    """The measured failure: the loop's rollouts ran torch's default thread per core beside the env workers, and
    the stage slowed through the hour (docs/results.md). The engine now limits torch while its workers run.
    (conftest's autouse fixture gives torch's thread count back after.)"""
    import toy_env

    from agentprm.agent.policies import RandomAgent
    from agentprm.envs.base import TaskSpec
    from agentprm.models import device
    from agentprm.rollout.engine import episode_jobs, run_episodes

    class Recording(RandomAgent):
        seen: list[int] = []

        def act(self, states, turns):
            self.seen.append(torch.get_num_threads())
            return super().act(states, turns)

    monkeypatch.setattr(device, "_cores", lambda: 2)
    monkeypatch.setattr(device, "_threads_chosen", False)
    torch.set_num_threads(2)
    agent = Recording(0)
    tasks = [TaskSpec(f"c{i}", "count", "2", env="test-counter") for i in range(3)]
    episodes = run_episodes(episode_jobs(tasks, 2, 0, 4, "t"), agent, num_envs=4, num_workers=2, progress=False)
    assert len(episodes) == 6 and all(s.action in toy_env.COMMANDS for e in episodes for s in e.steps)
    assert agent.seen and set(agent.seen) == {1}
    assert torch.get_num_threads() == 2
