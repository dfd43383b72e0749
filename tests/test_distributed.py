"""Gradient accumulation and data parallelism in the training core: pieces of a batch — micro-batches in one
process, or shares of it in several processes under `accelerate launch` (gloo on CPU) — give the training of the
whole batch in one piece: the same loss curve and the same weights."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentprm.cli import main


@pytest.fixture(scope="module")
def demos(tmp_path_factory, generated_tasks) -> Path:
    path = tmp_path_factory.mktemp("dp") / "demos.parquet"
    assert main(["demos", "--tasks", str(generated_tasks.train), "--out", str(path), "--workers", "1"]) == 0
    return path


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def curve(summary: Path) -> list[float]:
    return [row["loss"] for row in json.loads(summary.read_text())["loss_curve"]]


def sft(demos: Path, out: Path, model: Path, *extra: str) -> list[str]:
    return ["sft", "--demos", str(demos), "--model", str(model), "--out", str(out), "--epochs", "0.5",
            "--batch-size", "8", "--lr", "1e-3", "--json", f"{out}.json", *extra]


def test_micro_batches_train_like_the_whole_batch(demos, tiny_policy, tmp_path):
    """SFT's loss is a mean over tokens, not examples: the pieces are weighted by their tokens ("weight")."""
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    assert main(sft(demos, whole, tiny_policy)) == 0
    assert main(sft(demos, pieces, tiny_policy, "--grad-accum", "3")) == 0
    assert curve(Path(f"{whole}.json")) == pytest.approx(curve(Path(f"{pieces}.json")), rel=1e-5, abs=1e-6)
    a, b = weights(whole), weights(pieces)
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)   # Adam: rounding-level sign flips move ±lr
    assert not torch.equal(a["model.norm.weight"], weights(tiny_policy)["model.norm.weight"])   # it trained


@pytest.mark.skipif(shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists(),
                    reason="accelerate's launcher is not installed")
def test_two_processes_follow_the_loss_curve_of_one(demos, tiny_policy, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(sft(demos, one, tiny_policy)) == 0
    launcher = shutil.which("accelerate") or str(Path(sys.executable).parent / "accelerate")
    agentprm = str(Path(sys.executable).parent / "agentprm")
    done = subprocess.run([launcher, "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
                           "--mixed_precision", "no", "--dynamo_backend", "no", agentprm,
                           *sft(demos, two, tiny_policy)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert curve(Path(f"{one}.json")) == pytest.approx(curve(Path(f"{two}.json")), rel=1e-5, abs=1e-6)
    a, b = weights(one), weights(two)
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
    # one writer: the folder and its summary, and no temp copies beside them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "one.json", "two", "two.json"]
