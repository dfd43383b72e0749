"""Resumable stages. A stage writes its output to `<stem>.partial<suffix>` and renames it into place; only then is its
completion marker written. After a kill -9 at any moment, `--resume` skips every marked stage, deletes the
partial output of the interrupted one and runs it again from scratch (stages are seeded, so the redo gives the
same result): no rollout is lost, none is counted twice. A stage that continues what an interrupted attempt kept
(the rollout shards, a training's checkpoints) reports the seconds of its earlier attempts too (`carried_seconds`)."""
from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.registry import task_generator
from agentprm.errors import UserError
from agentprm.io import atomic_leftovers, read_text, write_json
from agentprm.outputs import hold_lock
from agentprm.tracking import active
from agentprm.train.checkpoint import discard, resumable

MARKERS = ".stages"
LOCK = "lock.json"   # under MARKERS: the one process working on the run folder


def run_lock(run_dir: Path):
    """One writer per run folder: a second process working on it (two `--resume` of one run) is refused with a
    one-line error before it changes anything, instead of racing on the same `*.partial` outputs."""
    return hold_lock(run_dir / MARKERS / LOCK, run_dir)


class StageRunner:
    def __init__(self, run_dir: Path, resume: bool, reuse: tuple[Path, set[str]] | None = None,
                 checkpoint_every_s: float = 0.0):
        """`reuse = (other_run, names)`: a stage in `names` that `other_run` completed is copied from there instead
        of built (its recorded seconds kept), for runs that share it exactly (same seed and stage config).
        `checkpoint_every_s`: the trainings inside a stage keep a checkpoint under `.stages/<stage>.training/`
        that often (train/checkpoint.py), so a stage killed mid-training resumes there; 0 = off."""
        self.run_dir, self.resume, self.reuse = run_dir, resume, reuse
        self.checkpoint_every_s = checkpoint_every_s
        (run_dir / MARKERS).mkdir(parents=True, exist_ok=True)
        self.timings: dict[str, float] = {}

    def marker(self, name: str) -> Path:
        return self.run_dir / MARKERS / f"{name.replace('/', '__')}.done"

    def started(self, name: str) -> Path:
        """Written before a stage writes anything: the record that lets a rerun delete what the stage left."""
        return self.marker(name).with_suffix(".started")

    def done(self, name: str) -> bool:
        return self.marker(name).exists()

    def run(self, name: str, output: str, build: Callable[[Path], None], keep_partial: bool = False,
            beside: tuple[str, ...] = ()) -> Path:
        """Run `build(tmp_path)` unless `name` completed earlier; returns the final output path. With `keep_partial`
        (a stage whose output is a folder of shards it can continue), the folder an interrupted attempt of this
        stage left is handed to `build` again instead of deleted. `beside`: files the build writes next to its output
        (an eval's episodes), copied with it where the stage is reused from another run."""
        final = self.run_dir / output
        if self.done(name):
            self.timings[name] = stage_record(self.marker(name))["seconds"]
            return final
        partial = final.with_name(f"{final.stem}.partial{final.suffix}")
        # leftovers of an interrupted attempt, with the temp copies a kill inside an atomic write left beside them:
        # deleted only where this stage recorded that it started writing them; anything else there is not ours
        stale = [p for p in dict.fromkeys((partial, final, *atomic_leftovers(partial), *atomic_leftovers(final)))
                 if p.exists() or p.is_symlink()]   # (final's leftovers include partial's: ".policy.partial.*")
        if stale and not self.started(name).exists():
            raise UserError(f"{stale[0]}: in the run folder where stage {name!r} writes, but agentprm did not write "
                            "it; move it out of the run folder, then resume")
        keep = keep_partial and self.started(name).exists() and partial.is_dir() and not partial.is_symlink()
        tracker, training = active(), self.marker(name).with_suffix(".training")
        kept = [path for path, held in ((partial, keep), (training, training.is_dir())) if held]
        carried = carried_seconds(self.started(name), kept) if kept else 0.0
        for path in stale:
            if keep and path == partial:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        write_json(self.started(name), {"stage": name, "output": output, "started_at": time.time(),
                                        "carried_seconds": carried})
        partial.parent.mkdir(parents=True, exist_ok=True)
        source = self._reusable(name)
        start, extra = time.monotonic(), {"carried_seconds": carried} if carried else {}
        if source is None:
            with tracker.scoped(name) if tracker else nullcontext(), resumable(training, self.checkpoint_every_s):
                build(partial)   # a training inside logs under the stage, and keeps its checkpoints in `training`
        else:
            other = source.parent.parent
            copy = shutil.copytree if (other / output).is_dir() else shutil.copy2
            copy(other / output, partial)
            for name_beside in beside:
                if (other / name_beside).is_file():
                    shutil.copy2(other / name_beside, self.run_dir / name_beside)
            extra = {"reused_from": str(other)}
        partial.rename(final)
        self.timings[name] = round(carried + time.monotonic() - start, 2)
        if source is not None:   # charge the stage's own cost: equal budgets stay comparable
            self.timings[name] = stage_record(source)["seconds"]
        write_json(self.marker(name), {"stage": name, "output": output, "seconds": self.timings[name], **extra})
        if tracker:
            tracker.log({"seconds": self.timings[name]}, 0, scope=f"stages/{name}")
        self.started(name).unlink()
        discard(training)
        return final

    def _reusable(self, name: str) -> Path | None:
        """The other run's completion marker of `name` when that stage may be copied from it, else None."""
        if self.reuse is None or name not in self.reuse[1]:
            return None
        source = self.reuse[0] / MARKERS / self.marker(name).name
        return source if source.exists() else None


def stage_record(path: Path) -> dict:
    """A stage's marker (.stages/<stage>.done or .started) as written, or a one-line error naming it: a marker that
    is not a JSON object with numeric seconds cannot say what the stage did."""
    try:
        record = json.loads(read_text(path, max_bytes=2**16))
    except (ValueError, RecursionError):
        record = None
    fields = {"seconds"} if path.suffix == ".done" else set()
    if not isinstance(record, dict) or any(not isinstance(record.get(f), (int, float)) for f in fields) or not all(
            isinstance(record.get(f, 0.0), (int, float)) for f in ("started_at", "carried_seconds")):
        raise UserError(f"{path}: not a stage record agentprm wrote (a JSON object with its seconds); delete it to "
                        "run that stage again, then resume")
    return record


def carried_seconds(started: Path, kept: list[Path]) -> float:
    """The seconds earlier attempts of a stage spent on the work a resumed attempt continues (the shards of its
    partial output, a training's checkpoints: `kept`), so a stage killed and resumed reports its whole cost, not its
    last attempt's: the last attempt's span from its start to the newest file it left in `kept`, added to what that
    attempt carried. A marker written before this record (no `started_at`) carries 0."""
    record = stage_record(started)
    begun = record.get("started_at")
    if begun is None:
        return 0.0
    newest = max((p.stat().st_mtime for root in kept for p in root.rglob("*") if p.is_file()), default=begun)
    return float(record.get("carried_seconds", 0.0)) + max(0.0, newest - begun)


def generated_train_split(stages: StageRunner, name: str, env: str, num: int, seed: int, types=None,
                          workers: int | None = None, progress: bool = True) -> list:
    """The first `num` games of environment `env`'s generated train split for the run's seed, as the resumable
    stage tasks/<name> (a generator's game k does not depend on how many it makes, so the loop's own `tasks.train`
    games are the first of them): the larger pools of beam-distill's searches and π0's demos."""
    folder = stages.run(f"tasks_{name}", f"tasks/{name}", lambda out: task_generator(env)(
        out, "train", num, seed, types=types, progress=progress, workers=workers or os.cpu_count() or 1))
    return load_tasks(folder, types)
