"""Shared fixtures.

`generated_tasks` (session scope): a small set of verified ALFWorld games, generated once per test session
(~20 s on 2 cores) and shared by every test that asks for it. It returns a `GeneratedTasks` with

    .train  folder with tasks.jsonl + 6 games, one per task type (TASK_TYPES order), floor plans of the train split
    .eval   the same for the eval split (floor plans disjoint from train)
    .seed / .num  the arguments they were generated with (seed 0, 6 games each)

Load them with `agentprm.envs.alfworld.tasks.load_tasks(generated_tasks.train)` and play one with
`AlfWorldEnv(task.game)`. Treat the folders as read-only (copy them first if a test must modify games).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class GeneratedTasks:
    train: Path
    eval: Path
    seed: int
    num: int


@pytest.fixture(scope="session")
def generated_tasks(tmp_path_factory: pytest.TempPathFactory) -> GeneratedTasks:
    from agentprm.envs.alfworld.generate import generate_tasks

    root = tmp_path_factory.mktemp("generated_tasks")
    seed, num = 0, 6
    for split in ("train", "eval"):
        generate_tasks(root / split, split, num, seed, progress=False)
    return GeneratedTasks(train=root / "train", eval=root / "eval", seed=seed, num=num)
