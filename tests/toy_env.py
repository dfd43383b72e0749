"""A toy environment registered from outside the package, as a user's own file would: a counter to bring to a
target. tests/test_env_registry.py plays it through rollouts, targets, the PRM and beam search."""
from __future__ import annotations

from agentprm.envs.base import TaskSpec, TextEnv, Turn
from agentprm.envs.registry import register_env

COMMANDS = ("add one", "take one", "look")


class CounterEnv:
    """Start at 0; "add one" / "take one" move the counter; won when it shows the target (the task's `game`)."""

    def __init__(self, task: TaskSpec, max_steps: int):
        self.task_id, self.task_type = task.task_id, task.task_type
        self.target, self.max_steps = int(task.game), max_steps

    def _turn(self, reward: float = 0.0, won: bool = False, **info) -> Turn:
        return Turn(f"make the counter show {self.target}.", f"The counter shows {self.value}.", COMMANDS, reward,
                    won or self.steps >= self.max_steps, won, {"admissible_action": True, **info})

    def reset(self) -> Turn:
        self.value, self.steps = 0, 0
        return self._turn()

    def step(self, action: str) -> Turn:
        self.steps += 1
        self.value += {"add one": 1, "take one": -1}.get(action, 0)
        won = self.value == self.target
        return self._turn(float(won), won, truncated=not won and self.steps >= self.max_steps)

    def close(self) -> None:
        pass


@register_env("test-counter")
def make_counter(task: TaskSpec, max_steps: int, expert: bool) -> TextEnv:
    return CounterEnv(task, max_steps)


@register_env("test-counter-once", replayable=False)
def make_counter_once(task: TaskSpec, max_steps: int, expert: bool) -> TextEnv:
    return CounterEnv(task, max_steps)
