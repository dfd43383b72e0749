"""Experiment tracking (agentprm/tracking.py): what the training core, the PRM trainer and the loop report reaches
TensorBoard's event files, an offline W&B run and MLflow's store, read back here with each backend's own reader (W&B
has none for offline runs in Python: its .wandb file is LevelDB's log format of its protobuf records)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentprm.cli import main
from agentprm.errors import UserError
from agentprm.tracking import TrackingConfig, active, flat, tracking
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb")


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def mlflow_run(db: Path, experiment: str = "agentprm"):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return client, run


def wandb_history(folder: Path) -> list[dict]:
    """The history rows of the offline run under `folder`: LevelDB log records (32 KiB blocks, 7-byte record headers:
    checksum, length, type 1 full / 2 first / 3 middle / 4 last) after W&B's 7-byte file header."""
    from wandb.proto import wandb_internal_pb2

    (path,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    data, block, pos, part, rows = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        room = block - pos % block
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if room < 7 or kind == 0:   # a block's zero-filled tail
            pos += room
            continue
        part += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            part = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


def test_the_training_core_reports_every_interval_to_each_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    model, losses = torch.nn.Linear(2, 1), []

    def loss_fn(m, batch):
        loss = (m(torch.tensor(batch)) ** 2).mean()
        losses.append(float(loss.detach()))
        return loss, {"shift": 1.0}

    cfg = TrackingConfig("tensorboard,wandb,mlflow", report_every=2, logging_dir=str(tmp_path))
    with tracking(cfg, tmp_path / "unused", "toy", {"prm": {"lr": 0.001}, "sizes": [1, 2]}):
        assert active() is not None
        train(model, [[1.0, 2.0]] * 12, loss_fn, TrainConfig(steps=6, batch_size=2, log_every=3), description="toy",
              progress=False)
    assert active() is None
    expected = [(2, losses[1]), (4, losses[3]), (6, losses[5])]   # the live loss of steps 2, 4, 6

    scalars = tensorboard_scalars(tmp_path / "tensorboard" / "toy")
    assert [s for s, _ in scalars["toy/loss"]] == [2, 4, 6]
    assert [v for _, v in scalars["toy/loss"]] == pytest.approx([v for _, v in expected], rel=1e-6)
    assert [v for _, v in scalars["toy/shift"]] == [1.0, 1.0, 1.0]

    client, run = mlflow_run(tmp_path / "mlflow.db")
    history = client.get_metric_history(run.info.run_id, "toy/loss")
    assert [m.step for m in history] == [2, 4, 6]
    assert [m.value for m in history] == pytest.approx([v for _, v in expected])
    assert run.data.params["prm.lr"] == "0.001" and run.data.params["sizes"] == "[1, 2]"
    assert run.info.status == "FINISHED"

    rows = [r for r in wandb_history(tmp_path) if "toy/loss" in r]
    assert [r["toy/step"] for r in rows] == [2, 4, 6]
    assert [r["toy/loss"] for r in rows] == pytest.approx([v for _, v in expected])


def test_nothing_is_opened_without_report_to_and_bad_names_are_one_line(tmp_path):
    with tracking(TrackingConfig(), tmp_path, "x", {}) as opened:
        assert opened is None and active() is None
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="'tensorbord' is not one of none, tensorboard, wandb, mlflow"):
        TrackingConfig("tensorbord").backends()
    assert flat({"a": {"b": None, "c": [1]}, "d": True}) == {"a.b": "None", "a.c": "[1]", "d": True}


@pytest.mark.slow   # a miniature loop: make test-all and CI
def test_the_loop_reports_its_trainings_stages_and_eval_rows(tmp_path, generated_tasks, tiny_policy):
    from test_loop import mini_config

    cfg = mini_config(tmp_path, generated_tasks, tiny_policy, tracking={"report_every": 1},
                      eval={"max_steps": 4, "best_of_n": []})
    run = tmp_path / "run"
    assert main(["loop", "--config", str(cfg), "--run-dir", str(run), "--report-to", "tensorboard"]) == 0
    scalars = tensorboard_scalars(run / "tracking" / "tensorboard" / "run")
    results = json.loads((run / "results.json").read_text())
    for row in results["rows"]:   # each eval row at its iteration, equal to results.json
        stage = row["policy"] if row["best_of_n"] == 1 and not row.get("search") else None
        if stage:
            assert scalars[f"eval/{stage}/success_rate"] == [(row["iteration"], pytest.approx(row["success_rate"]))]
    assert [s for s, _ in scalars["iter_1/prm/loss"]] == list(range(1, len(scalars["iter_1/prm/loss"]) + 1))
    meta = json.loads((run / "iter_1" / "prm" / "agentprm.json").read_text())   # Q1's metrics after training
    assert scalars["iter_1/prm/heldout/bce"][0][1] == pytest.approx(meta["metrics"]["heldout"]["bce"])
    assert scalars["stages/iter_1/rollouts/seconds"][0][1] == pytest.approx(results["stage_seconds"]["iter_1/rollouts"])
    assert "iter_1/policy/loss" in scalars


def test_a_command_reports_under_its_logging_dir(tmp_path, monkeypatch, capsys):
    from agentprm.data.tables import write_with_info
    from agentprm.data.trajectories import write_episodes_file
    from agentprm.targets.mc import targets_from_rollouts
    from test_prm import episodes_for

    rollouts = write_episodes_file(tmp_path / "rollouts.parquet", [e for t in range(4) for e in episodes_for(f"t{t}")])
    targets = targets_from_rollouts(rollouts, gamma=1.0)
    write_with_info(tmp_path / "q.parquet", targets.table, targets.info)
    monkeypatch.chdir(tmp_path)
    argv = ["train-prm", "--targets", "q.parquet", "--init", "tiny", "--out", "prm", "--epochs", "3",
            "--batch-size", "2", "--report-every", "5"]
    assert main([*argv, "--report-to", "tensorbord"]) == 2   # one line, before any work
    assert "'tensorbord' is not one of" in capsys.readouterr().err and not Path("prm").exists()
    assert main([*argv, "--report-to", "tensorboard"]) == 0
    (folder,) = (tmp_path / "tracking" / "tensorboard").iterdir()   # ./tracking/tensorboard/train-prm
    scalars = tensorboard_scalars(folder)
    assert [s for s, _ in scalars["PRM soft-bce/loss"]] == [5, 10]   # 9 examples x 3 epochs / 2 = 14 steps
    meta = json.loads((tmp_path / "prm" / "agentprm.json").read_text())
    assert scalars["PRM soft-bce/heldout/pairwise_accuracy"][0][1] == \
        pytest.approx(meta["metrics"]["heldout"]["pairwise_accuracy"])
