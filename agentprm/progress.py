"""One progress bar for long work (rich), silent when disabled or when output is not a terminal-friendly run."""
from __future__ import annotations

from contextlib import contextmanager

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class _Bar:
    def __init__(self, progress: Progress | None, task_id=None):
        self._progress, self._task = progress, task_id

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)


@contextmanager
def progress_bar(total: int, description: str, enabled: bool = True):
    if not enabled:
        yield _Bar(None)
        return
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, transient=False) as progress:
        yield _Bar(progress, progress.add_task(escape(description), total=total))
