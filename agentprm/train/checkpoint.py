"""Mid-training checkpoints: a training killed (kill -9, a lost machine) resumes at its last checkpoint instead of
from step 0, and ends with the weights an uninterrupted run ends with.

A `resumable(root, every_s)` block (the loop's stage runner around each stage; `cli.main` around `sft`, `train-prm`
and `train-policy`) gives every training inside it a slot, `root/<k>` for the block's k-th training — the trainings of
a stage run in the same order every time. The training core (train/core.py) saves its slot every `every_s` seconds
and when it ends: the trainable weights (safetensors), the optimizer's and the scheduler's state, the torch and Python
RNG states, the steps done and the logged history. Started again in the same block, a training whose slot holds a
state of the same training (its description, example count, settings and trainable parameters: the fingerprint)
loads it and continues from the next step; a slot of another training is replaced. The block's owner deletes the root
when its output is in place.

The optimizer state is read with `torch.load(weights_only=True)`: tensors and plain containers only, never code — and
only from a folder agentprm wrote (its owner marker)."""
from __future__ import annotations

import json
import random
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from agentprm.io import atomic_leftovers
from agentprm.outputs import atomic_dir, check_replaceable, owner_record

if TYPE_CHECKING:   # the loop's stage runner opens `resumable` blocks without loading torch
    import torch

META, WEIGHTS, STATE = "meta.json", "trainable.safetensors", "optimizer.pt"


class Slot:
    """One training's checkpoint folder."""

    def __init__(self, path: Path, fingerprint: dict, every_s: float):
        self.path, self.fingerprint, self.every_s = path, fingerprint, every_s
        self.last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every_s

    def load(self, params: dict[str, torch.nn.Parameter], opt, sched) -> dict | None:
        """Restore a saved state of this same training into `params`, `opt`, `sched` (anything with `state_dict` /
        `load_state_dict`; None: none) and the RNGs; returns what the training needs to continue ({"step",
        "finished", "history", "window"}), or None when there is none to resume."""
        import torch
        from safetensors.torch import load_file

        meta_path = self.path / META
        if owner_record(self.path) is None or not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") != self.fingerprint:
            return None
        print(f"resuming {self.fingerprint['description']} from its checkpoint after step {meta['step']} "
              f"({self.path})", flush=True)
        weights = load_file(self.path / WEIGHTS)
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(weights[name])
        state = torch.load(self.path / STATE, weights_only=True)
        opt.load_state_dict(state["optimizer"])
        if sched is not None:
            sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        version, internal, gauss = meta["python_rng"]
        random.setstate((version, tuple(internal), gauss))
        return {"step": meta["step"], "finished": meta["finished"], "history": meta["history"],
                "window": meta["window"]}

    def save(self, step: int, params: dict[str, torch.nn.Parameter], opt, sched, history: list, window: list,
             finished: bool) -> None:
        """The state after `step` optimiser steps (`finished`: the training's last), written whole or not at all (a
        temp folder renamed over the old)."""
        import torch
        from safetensors.torch import save_file

        _clear_leftovers(self.path)   # a kill inside an earlier save's block
        with atomic_dir(self.path) as tmp:
            save_file({n: p.detach().cpu().contiguous() for n, p in params.items()}, str(tmp / WEIGHTS))
            torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict() if sched is not None else None,
                        "torch_rng": torch.get_rng_state()}, tmp / STATE)
            (tmp / META).write_text(json.dumps({"fingerprint": self.fingerprint, "step": step, "finished": finished,
                                                "history": history, "window": window,
                                                "python_rng": random.getstate()}))
        self.last = time.monotonic()


class Checkpoints:
    """The slots of one `resumable` block."""

    def __init__(self, root: Path, every_s: float):
        self.root, self.every_s, self.count = root, every_s, 0

    def slot(self, fingerprint: dict) -> Slot:
        self.count += 1
        return Slot(self.root / str(self.count), fingerprint, self.every_s)


_active: Checkpoints | None = None


def active_checkpoints() -> Checkpoints | None:
    return _active


@contextmanager
def resumable(root: Path, every_s: float) -> Iterator[Checkpoints | None]:
    """Checkpoint the trainings inside the block under `root` (every_s = 0: off). The root is left in place: its
    owner deletes it (`discard`) once the block's output is saved, so a kill between the two loses nothing."""
    global _active
    if every_s <= 0:
        yield None
        return
    outer, _active = _active, Checkpoints(root, every_s)
    try:
        yield _active
    finally:
        _active = outer


def _clear_leftovers(slot: Path) -> None:
    """The temp copies a kill inside `atomic_dir` left beside a slot (".<k>.<random>.tmp" / ".old"): agentprm's by
    their name, in a folder only agentprm writes."""
    for stale in atomic_leftovers(slot):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)


def discard(root: Path) -> None:
    """Delete a block's checkpoints — only folders agentprm wrote as checkpoints, and their temp copies; the root
    itself once nothing else is in it."""
    if root.is_dir() and not root.is_symlink():
        for slot in list(root.iterdir()):
            if slot.is_dir() and not slot.is_symlink() and owner_record(slot) is not None:
                check_replaceable(slot)   # nothing was put in it since agentprm wrote it
                _clear_leftovers(slot)
                shutil.rmtree(slot)
        if not any(root.iterdir()):
            root.rmdir()
