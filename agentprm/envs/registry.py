"""Environments by name. An entry makes the `TextEnv` of one task (a `TaskSpec`, whose `env` field names the entry)
and says whether the env can be *replayed*: whether the same commands from a reset always reach the same state.
Branch rollouts, Reset-50-50, the Monte-Carlo oracle and beam search restore a state by replaying its commands in a
fresh env, so they refuse an env that cannot.

    @register_env("my-env", replayable=True, tasks=my_task_generator)   # tasks: optional (see Environment)
    def make(task: TaskSpec, max_steps: int, expert: bool) -> TextEnv:
        return MyEnv(task.game, max_steps=max_steps)

`make` runs in the env worker processes (envs/pool.py), so it is a module-level function of an importable module. A
package of your own registers without touching agentprm through an entry point of the group `agentprm.envs` whose
object is that module (it registers on import), e.g. in pyproject.toml:
`[project.entry-points."agentprm.envs"] my-env = "my_package.env"`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterable

from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.generate import generate_tasks
from agentprm.envs.base import TaskSpec, TextEnv
from agentprm.envs.scienceworld import ScienceWorldTextEnv, generate_tasks as scienceworld_tasks_folder
from agentprm.envs.sokoban import generate_tasks as sokoban_tasks_folder, make as make_sokoban
from agentprm.errors import UserError
from agentprm.registry import Registry

ENTRY_POINTS = "agentprm.envs"


@dataclass(frozen=True)
class Environment:
    name: str
    make: Callable[[TaskSpec, int, bool], TextEnv]   # (task, max_steps, expert) -> a reset-able env
    replayable: bool = True   # the same commands from a reset reach the same state
    tasks: Callable[..., list[TaskSpec]] | None = None   # the task generator, if the env has one: (out_dir, split,
    # num, seed, types=None, workers=1, progress=True, force=False) -> tasks, written as a task folder (tasks.jsonl)
    # that `load_tasks` reads; split "train" or "eval" (the loop's `tasks:` section and `agentprm tasks generate`)


ENVS: Registry[Environment] = Registry("environment", group=ENTRY_POINTS)


def register_env(name: str, *, replayable: bool = True, tasks: Callable[..., list[TaskSpec]] | None = None):
    def add(make: Callable[[TaskSpec, int, bool], TextEnv]):
        ENVS.add(name, Environment(name, make, replayable, tasks))
        return make
    return add


def task_generator(name: str) -> Callable[..., list[TaskSpec]]:
    """The task generator of environment `name`; a one-line error when it has none."""
    generator = get_env(name).tasks
    if generator is None:
        raise UserError(f"environment {name!r} registers no task generator: give task folders instead "
                        "(tasks.train_dir / tasks.eval_dir)")
    return generator


def get_env(name: str) -> Environment:
    """The entry `name`: registered already, or by importing the entry point of that name."""
    return ENVS.entry(name)


def env_factory(task: TaskSpec, max_steps: int, expert: bool = False) -> Callable[[], TextEnv]:
    """What an env worker calls to build `task`'s env (a picklable zero-argument callable)."""
    return functools.partial(get_env(task.env).make, task, max_steps, expert)


def require_replay(tasks: Iterable[TaskSpec], what: str) -> None:
    """A one-line error before `what` starts on tasks of an env that cannot be replayed to a state."""
    for name in sorted({t.env for t in tasks}):
        if not get_env(name).replayable:
            raise UserError(f"{what} restores states by replaying commands, and environment {name!r} cannot be "
                            "replayed (registered with replayable=False)")


@register_env("alfworld", tasks=generate_tasks)
def alfworld(task: TaskSpec, max_steps: int, expert: bool) -> TextEnv:
    """ALFWorld on the TextWorld engine (deterministic: replayable); `expert` attaches alfworld's hand-coded expert."""
    return AlfWorldEnv(task.game, max_steps=max_steps, task_id=task.task_id, expert=expert)


@register_env("scienceworld", tasks=scienceworld_tasks_folder)
def scienceworld(task: TaskSpec, max_steps: int, expert: bool) -> TextEnv:
    """ScienceWorld on its Java VM (envs/scienceworld.py; optional: `pip install 'agentprm[scienceworld]'`)."""
    return ScienceWorldTextEnv(task, max_steps=max_steps, expert=expert)


register_env("sokoban", tasks=sokoban_tasks_folder)(make_sokoban)   # envs/sokoban.py: pure Python, replayable
