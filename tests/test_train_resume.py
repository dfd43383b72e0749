"""a training killed mid-way resumes from its checkpoint (train/checkpoint.py) and ends with the weights an
uninterrupted run ends with — in-process (a crash at a chosen step) and as a user meets it (`train-prm` killed with
SIGKILL, then the same command again)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from agentprm.train.checkpoint import discard, resumable
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

torch.set_num_threads(1)


class Crash(Exception):
    pass


def run(root=None, crash_at: int = 0, seen: list | None = None) -> tuple[dict, list]:
    """A model with dropout (the RNG state matters) and AdamW (its moments matter) trained for 12 steps."""
    torch.manual_seed(123)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    data = [[float(i), float(i % 3), 1.0, -float(i)] for i in range(24)]
    steps = seen if seen is not None else []

    def loss_fn(m, batch):
        steps.append(len(steps) + 1)
        if crash_at and len(steps) == crash_at:
            raise Crash
        return (m(torch.tensor(batch)) ** 2).mean(), {}

    cfg = TrainConfig(lr=0.05, steps=12, batch_size=4, log_every=5, seed=7)
    with resumable(root, every_s=1e-9) if root else resumable(None, 0):
        history = train(model, data, loss_fn, cfg, description="toy", progress=False)
    return {k: v.clone() for k, v in model.state_dict().items()}, history


def test_a_crashed_training_resumes_to_the_uninterrupted_weights(tmp_path):
    plain, plain_history = run()
    root = tmp_path / "ckpt"
    with pytest.raises(Crash):
        run(root, crash_at=8)                 # steps 1-7 done and checkpointed, step 8 dies
    assert (root / "1" / "meta.json").is_file()
    seen: list = []
    resumed, history = run(root, seen=seen)   # the same training again: it starts at step 8
    assert len(seen) == 5                     # steps 8..12 only
    assert [h["step"] for h in history] == [5, 10, 12]
    for name, tensor in plain.items():
        assert torch.equal(resumed[name], tensor), name
    assert [round(h["loss"], 6) for h in history] == [round(h["loss"], 6) for h in plain_history]
    again, _ = run(root, seen=(seen := []))   # a finished slot: nothing trained again, the same weights
    assert seen == [] and all(torch.equal(again[n], t) for n, t in plain.items())
    discard(root)
    assert not root.exists()


def test_a_checkpoint_of_another_training_is_not_resumed(tmp_path):
    root = tmp_path / "ckpt"
    with pytest.raises(Crash):
        run(root, crash_at=5)
    torch.manual_seed(0)
    other = torch.nn.Linear(4, 1)   # another model: its fingerprint differs, so it trains from step 1
    seen = []
    with resumable(root, every_s=1e-9):
        train(other, [[1.0, 2.0, 3.0, 4.0]] * 8, lambda m, b: (seen.append(1) or (m(torch.tensor(b)) ** 2).mean(), {}),
              TrainConfig(steps=3, batch_size=2), description="toy", progress=False)
    assert len(seen) == 3


def test_discard_keeps_what_agentprm_did_not_write(tmp_path):
    root = tmp_path / "ckpt"
    with pytest.raises(Crash):
        run(root, crash_at=3)
    (root / "notes.txt").write_text("mine")
    discard(root)
    assert (root / "notes.txt").read_text() == "mine" and not (root / "1").exists()


@pytest.fixture()
def targets(tmp_path):
    from agentprm.data.tables import write_with_info
    from agentprm.data.trajectories import write_episodes_file
    from agentprm.targets.mc import targets_from_rollouts
    from test_prm import episodes_for

    rollouts = write_episodes_file(tmp_path / "rollouts.parquet", [e for t in range(4) for e in episodes_for(f"t{t}")])
    t = targets_from_rollouts(rollouts, gamma=1.0)
    return write_with_info(tmp_path / "q.parquet", t.table, t.info)


@pytest.mark.slow   # three train-prm runs (~40 s): make test-all and CI
def test_train_prm_killed_with_sigkill_resumes_to_the_same_weights(tmp_path, targets):
    def command(out):
        return [sys.executable, "-m", "agentprm", "train-prm", "--targets", str(targets), "--init", "tiny",
                "--out", str(out), "--epochs", "300", "--batch-size", "2", "--threads", "1",
                "--checkpoint-every-s", "0.2"]

    assert subprocess.run(command(tmp_path / "plain"), capture_output=True).returncode == 0
    root = tmp_path / ".killed.agentprm-training"
    proc = subprocess.Popen(command(tmp_path / "killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (root / "1" / "meta.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert proc.poll() is None, "training ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed").exists() and (root / "1" / "meta.json").exists()

    again = subprocess.run(command(tmp_path / "killed"), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "resuming PRM soft-bce from its checkpoint after step" in again.stdout
    plain = load_file(tmp_path / "plain" / "model.safetensors")
    killed = load_file(tmp_path / "killed" / "model.safetensors")
    assert plain.keys() == killed.keys()
    for name in plain:
        assert torch.allclose(plain[name], killed[name], atol=1e-6), name
    assert not root.exists()   # the checkpoints go once the output is in place
