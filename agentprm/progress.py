"""One progress bar for long work (rich), silent when disabled.

Where the output is not a terminal (a log file under nohup, CI), rich draws no live bar, so a job of an hour would be
silent until its end: there the bar also writes a plain line to stderr at most every `HEARTBEAT_S` seconds —
`rollout: 1,200/30,000 (4%), 0:04:10 elapsed, ~1:40:00 left` — and none at all for work shorter than that.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from datetime import timedelta

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

HEARTBEAT_S = 60.0   # the least seconds between two plain progress lines where there is no terminal
now = time.monotonic   # (a test's clock replaces it)


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


class _Bar:
    def __init__(self, progress: Progress | None, task_id=None, description: str = "", total: int = 0,
                 heartbeat: float | None = None):
        self._progress, self._task = progress, task_id
        self._description, self._total, self._heartbeat = description, total, heartbeat
        self._start = self._last = now()
        self._done = 0

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)
        self._done += n
        if self._heartbeat is None:   # a terminal draws the bar itself: no clock read here
            return
        t = now()
        if t - self._last < self._heartbeat:
            return
        self._last, elapsed = t, t - self._start
        left = elapsed / self._done * max(self._total - self._done, 0)
        share = f" ({100 * self._done / self._total:.0f}%)" if self._total else ""
        print(f"{self._description}: {self._done:,}/{self._total:,}{share}, {_clock(elapsed)} elapsed, "
              f"~{_clock(left)} left", file=sys.stderr, flush=True)


@contextmanager
def progress_bar(total: int, description: str, enabled: bool = True):
    if not enabled:
        yield _Bar(None)
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        heartbeat = None if progress.console.is_terminal else HEARTBEAT_S
        yield _Bar(progress, progress.add_task(escape(description), total=total), description, total, heartbeat)
