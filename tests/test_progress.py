"""Progress where there is no terminal: plain heartbeat lines on stderr, at most one per HEARTBEAT_S, none when the
bar is disabled — so an hour-long job under nohup says how far it is."""
from __future__ import annotations

import re

from agentprm import progress


def test_a_bar_without_a_terminal_writes_a_line_per_heartbeat_with_counts_and_time_left(monkeypatch, capsys):
    clock = iter([0.0, 10.0, 30.0, 65.0, 70.0, 200.0])   # start, then one reading per advance
    monkeypatch.setattr(progress, "now", lambda: next(clock))
    monkeypatch.setattr(progress, "HEARTBEAT_S", 60.0)
    with progress.progress_bar(3000, "rollout") as bar:
        for n in (100, 200, 1200, 100, 400):
            bar.advance(n)
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("rollout:")]
    # 65 s: 1,500 done, the first heartbeat; 70 s is within 60 s of it; 200 s: 2,000 done, 1,000 left at 10/s
    assert lines == ["rollout: 1,500/3,000 (50%), 0:01:05 elapsed, ~0:01:05 left",
                     "rollout: 2,000/3,000 (67%), 0:03:20 elapsed, ~0:01:40 left"]


def test_a_disabled_bar_and_short_work_write_nothing(monkeypatch, capsys):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 60.0)
    with progress.progress_bar(5, "quick") as bar:
        for _ in range(5):
            bar.advance()
    with progress.progress_bar(5, "silent", enabled=False) as bar:
        bar.advance(5)
    assert not re.search(r"^(quick|silent):", capsys.readouterr().err, re.M)
