"""The turn-level text-environment protocol that every stage uses.

    env = SomeEnv(...)
    turn = env.reset()             # Turn(task, observation, admissible, reward=0, done=False, won=False)
    while not turn.done:
        turn = env.step(action)    # any string: an inadmissible one is passed to the engine and answered
                                   # the way the engine answers it (ALFWorld: "Nothing happens."), never raises
    env.close()

A `Turn` is what the agent sees after reset/step. `reward` is the reward of the step that led here (0 after
reset); `won` marks task success; `done` is set on success or when the env's step budget runs out
(`info["truncated"] = True`). `info["admissible_action"]` records whether the action was admissible.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Turn:
    task: str
    observation: str
    admissible: tuple[str, ...]
    reward: float = 0.0
    done: bool = False
    won: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TextEnv(Protocol):
    task_id: str
    task_type: str

    def reset(self) -> Turn: ...

    def step(self, action: str) -> Turn: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TaskSpec:
    """One task of a split: which game of which environment (envs/registry.py). ALFWorld's catalogue and its
    tasks.jsonl are envs/alfworld/tasks.py."""
    task_id: str
    task_type: str
    game: str            # what the env is made from: ALFWorld's game folder (absolute path), or a name the env
                         # resolves itself (ScienceWorld: "<task>/<variation>/<simplifications>")
    split: str = ""
    floorplan: int = -1
    goal: str = ""
    walkthrough_len: int = -1
    seed: int = -1
    env: str = "alfworld"   # the registered environment that plays it

    def to_row(self, root: Path) -> dict:
        row = asdict(self)
        if os.path.isabs(self.game):   # a game folder (ALFWorld) is stored relative to the manifest; a name as it is
            row["game"] = os.path.relpath(self.game, root)
        if row["env"] == "alfworld":   # the default: ALFWorld's tasks.jsonl rows stay as they were
            del row["env"]
        return row
