"""Resumable stages. A stage writes its output to `<stem>.partial<suffix>` and renames it into place; only then is its
completion marker written. After a kill -9 at any moment, `--resume` skips every marked stage, deletes the
partial output of the interrupted one and runs it again from scratch (stages are seeded, so the redo gives the
same result): no rollout is lost, none is counted twice."""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from agentprm.errors import UserError
from agentprm.io import atomic_leftovers, write_json

MARKERS = ".stages"
LOCK = "lock.json"   # under MARKERS: the one process working on the run folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's live process
        return True
    return True


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """One writer per run folder: a second process working on it (two `--resume` of one run) is refused with a
    one-line error instead of racing on the same `*.partial` outputs. The lock records the holder's pid and host;
    a lock whose process is gone (killed with -9) is stale and taken over."""
    path = run_dir / MARKERS / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                holder = {}
            if holder.get("host") not in (None, me["host"]) or (holder.get("pid") and _alive(holder["pid"])):
                raise UserError(f"{run_dir}: in use by process {holder.get('pid')} on {holder.get('host')} "
                                f"({path}); wait for it, or remove the lock if that process is gone") from None
            path.unlink(missing_ok=True)   # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:
        raise UserError(f"{run_dir}: could not take the run lock {path}")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


class StageRunner:
    def __init__(self, run_dir: Path, resume: bool, reuse: tuple[Path, set[str]] | None = None):
        """`reuse = (other_run, names)`: a stage in `names` that `other_run` completed is copied from there instead
        of built (its recorded seconds kept), for runs that share it exactly (same seed and stage config)."""
        self.run_dir, self.resume, self.reuse = run_dir, resume, reuse
        (run_dir / MARKERS).mkdir(parents=True, exist_ok=True)
        self.timings: dict[str, float] = {}

    def marker(self, name: str) -> Path:
        return self.run_dir / MARKERS / f"{name.replace('/', '__')}.done"

    def done(self, name: str) -> bool:
        return self.marker(name).exists()

    def run(self, name: str, output: str, build: Callable[[Path], None]) -> Path:
        """Run `build(tmp_path)` unless `name` completed earlier; returns the final output path."""
        final = self.run_dir / output
        if self.done(name):
            self.timings[name] = json.loads(self.marker(name).read_text())["seconds"]
            return final
        partial = final.with_name(f"{final.stem}.partial{final.suffix}")
        # leftovers of an interrupted attempt, with the temp copies a kill inside an atomic write left beside them
        for stale in (partial, final, *atomic_leftovers(partial), *atomic_leftovers(final)):
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
        partial.parent.mkdir(parents=True, exist_ok=True)
        source = self._reusable(name)
        start, extra = time.monotonic(), {}
        if source is None:
            build(partial)
        else:
            other = source.parent.parent
            copy = shutil.copytree if (other / output).is_dir() else shutil.copy2
            copy(other / output, partial)
            extra = {"reused_from": str(other)}
        partial.rename(final)
        self.timings[name] = round(time.monotonic() - start, 2)
        if source is not None:   # charge the stage's own cost: equal budgets stay comparable
            self.timings[name] = json.loads(source.read_text())["seconds"]
        write_json(self.marker(name), {"stage": name, "output": output, "seconds": self.timings[name], **extra})
        return final

    def _reusable(self, name: str) -> Path | None:
        """The other run's completion marker of `name` when that stage may be copied from it, else None."""
        if self.reuse is None or name not in self.reuse[1]:
            return None
        source = self.reuse[0] / MARKERS / self.marker(name).name
        return source if source.exists() else None
