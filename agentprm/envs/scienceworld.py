"""ScienceWorld (Wang et al., EMNLP 2022) as a `TextEnv`: 30 elementary-science task types, each with its own
train/dev/test variations, simulated in Scala on a Java VM by the `scienceworld` package.

    pip install 'agentprm[scienceworld]'          # and a Java runtime >= 11 (`make java` installs one)
    tasks = scienceworld_tasks("train", 60, seed=0)   # (task type, variation) pairs of ScienceWorld's train split
    env = ScienceWorldTextEnv(tasks[0], max_steps=30)
    agentprm tasks generate --env scienceworld --split train --num 60 --out sw-train   # the same, as a task folder

A task is one variation of one task type: its `game` is "<task name>/<variation>/<simplifications>" (e.g.
"boil/3/easy"), so a task file names it without a path: `generate_tasks` writes a task folder whose tasks.jsonl
rows carry env "scienceworld" (read by the same `load_tasks` as ALFWorld's; the loop's `tasks: {env:
scienceworld}` makes its train and eval folders with it — "eval" is ScienceWorld's test split). A `Turn` has the task description as `task`, the env's
text as `observation` (a room description after reset), and the valid commands of the state (`info["valid"]`,
hundreds of them) as `admissible`. ScienceWorld scores partial progress 0–100: `reward` is the step's change of
score / 100, `won` is a score of 100; an episode ends when the env says it is completed (won, or failed: the score
drops below 0) or after `max_steps` (`info["truncated"]`). An unknown command is answered ("No known action
matches that input."), never raised.

**Expert**: ScienceWorld's gold path (`get_gold_action_sequence`): `info["expert_action"]` is its next command
while every command so far followed it — what `ExpertAgent` plays to make demonstrations. Where the gold path ends
(or was left) without the task completed, the episode ends there (`info["expert_exhausted"]`, not won): some gold
paths stop short of a score of 100 in the simulator.

**Replay**: the simulator is deterministic for a (task, variation, simplifications) and a command sequence (tested),
so branching, beam search and the oracle can restore a state by replaying its commands.

**Cost** (`python bench/scienceworld_env.py --num 6 --seed 0`, gold paths of 6 train tasks, 2 quiet cores): a Java
VM per env slot (~230 MB; 1.3 s to start), kept by the worker process and reused by the slot's next episode (a VM
that died — py4j "Answer from Java side is empty" — is dropped, never reused: the episode it died in errors, the
next starts a new VM); a reset (load + reset) median 0.6 s; a step median 0.04 s; 97–1,102 valid commands per
state (median 260).
"""
from __future__ import annotations

import logging
import random
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Sequence

from agentprm.envs.alfworld.tasks import refuse_overwrite, write_manifest
from agentprm.envs.base import TaskSpec, Turn
from agentprm.errors import UserError

SPLITS = {"train": "get_variations_train", "dev": "get_variations_dev", "test": "get_variations_test"}
DEFAULT_SIMPLIFICATIONS = "easy"   # teleport, doors open, no electrical wiring, self-watering plants: the common setting
WIN_SCORE = 100
_STEP_LIMIT = 100_000              # the VM's own episode limit; ours is max_steps
_IDLE: list = []                   # Java VMs of this process not held by an env (reused: one costs a second to start)


def _scienceworld():
    try:
        import scienceworld
    except ImportError:
        raise UserError("environment 'scienceworld' needs the scienceworld package and a Java runtime: pip install "
                        "'agentprm[scienceworld]' (and `make java` where `java` is missing)") from None
    # py4j logs a traceback for a failed call from more than one of its threads at once, which on CPython 3.11 can
    # corrupt the ast module's shared recursion counter (every later traceback then fails with "AST constructor
    # recursion depth mismatch"); the env raises the failure as an exception anyway, so the logs add nothing
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    return scienceworld


def _alive(vm) -> bool:
    return vm._gateway.java_process.poll() is None


def _discard(vm) -> None:
    """Drop a VM that died or stopped answering (py4j: "Answer from Java side is empty"): never reused."""
    try:
        vm._gateway.java_process.kill()
        vm._gateway.shutdown()
    except Exception:   # noqa: BLE001 - already gone; nothing of the user's is at stake
        pass


def _take_vm():
    while _IDLE:
        vm = _IDLE.pop()
        if _alive(vm):
            return vm
        _discard(vm)
    try:
        return _scienceworld().ScienceWorldEnv("", envStepLimit=_STEP_LIMIT)
    except (FileNotFoundError, OSError) as e:   # py4j launches `java`
        raise UserError(f"environment 'scienceworld' could not start its Java VM ({e}); install a Java runtime >= 11 "
                        "(`make java`)") from None


def parse_game(game: str) -> tuple[str, int, str]:
    """(task name, variation, simplifications) of a task's `game` string "<name>/<variation>/<simplifications>"."""
    name, _, rest = game.partition("/")
    variation, _, simplifications = rest.partition("/")
    if not name or not variation.isdigit():
        raise UserError(f"ScienceWorld game {game!r}: expected '<task name>/<variation>/<simplifications>'")
    return name, int(variation), simplifications


class ScienceWorldTextEnv:
    def __init__(self, task: TaskSpec, max_steps: int = 30, expert: bool = False):
        self.task_id, self.task_type, self.game = task.task_id, task.task_type, task.game
        self.name, self.variation, self.simplifications = parse_game(task.game)
        self.max_steps, self.expert = max_steps, expert
        self._vm = None
        self._score, self._turns, self._gold, self._on_gold = 0, 0, [], True

    def reset(self) -> Turn:
        from py4j.protocol import Py4JError
        for attempt in (0, 1):   # a VM that died since its last episode is replaced once
            if self._vm is None:
                self._vm = _take_vm()
            try:
                self._vm.load(self.name, self.variation, self.simplifications, generateGoldPath=self.expert)
                observation, info = self._vm.reset()
                break
            except Py4JError:
                self._drop_vm()
                if attempt:
                    raise
        self._gold = list(self._vm.get_gold_action_sequence()) if self.expert else []
        self._score, self._turns, self._on_gold = 0, 0, True
        return self._turn(observation, info, reward=0.0, done=False)

    def step(self, action: str) -> Turn:
        if self._vm is None:
            raise RuntimeError("step before reset")
        if self.expert:
            self._on_gold = self._on_gold and self._turns < len(self._gold) and action == self._gold[self._turns]
        from py4j.protocol import Py4JError
        try:
            observation, _, completed, info = self._vm.step(action)
        except Py4JError:   # the VM died mid-episode: this episode errors (the pool's max_errors), the next gets a new VM
            self._drop_vm()
            raise
        self._turns += 1
        score = int(info["score"])
        reward, self._score = (score - self._score) / WIN_SCORE, score
        # an expert episode ends where the gold path ends, or is left, with the task not completed: the expert has
        # no next command to give (the demo counts as not won)
        exhausted = self.expert and not completed and not (self._on_gold and self._turns < len(self._gold))
        truncated = not completed and (self._turns >= self.max_steps or exhausted)
        turn = self._turn(observation, info, reward=reward, done=bool(completed) or truncated)
        if truncated:
            turn.info["truncated"] = True
        if exhausted:
            turn.info["expert_exhausted"] = True
        turn.info["admissible_action"] = not observation.startswith("No known action")
        return turn

    def _turn(self, observation: str, info: dict, reward: float, done: bool) -> Turn:
        extra = {"score": self._score}
        if self.expert and self._on_gold and self._turns < len(self._gold):
            extra["expert_action"] = self._gold[self._turns]
        return Turn(task=info["taskDesc"], observation=observation.strip(), admissible=tuple(dict.fromkeys(info["valid"])),
                    reward=reward, done=done, won=self._score >= WIN_SCORE, info=extra)

    def _drop_vm(self) -> None:
        _discard(self._vm)
        self._vm = None

    def close(self) -> None:
        if self._vm is not None:   # the VM outlives the episode: the worker's next ScienceWorld env takes it, if alive
            (_IDLE.append if _alive(self._vm) else _discard)(self._vm)
            self._vm = None


@cache
def catalogue() -> dict[str, dict[str, list[int]]]:
    """{task name: {split: variations}} as the installed scienceworld package defines them (starts a VM once)."""
    vm = _take_vm()
    try:
        out = {}
        for name in vm.get_task_names():
            vm.load(name, 0, "")
            out[name] = {split: list(getattr(vm, method)()) for split, method in SPLITS.items()}
        return out
    finally:
        _IDLE.append(vm)


def scienceworld_tasks(split: str, n: int, seed: int = 0, task_names: list[str] | None = None,
                       simplifications: str = DEFAULT_SIMPLIFICATIONS) -> list[TaskSpec]:
    """`n` tasks of ScienceWorld's `split` (train | dev | test), spread evenly over the task types (round-robin over
    `task_names`, default all 30, each type's variations in a seeded order), so a split holds every type before it
    holds a second variation of any. Variations of different splits never overlap (ScienceWorld's own split)."""
    if split not in SPLITS:
        raise UserError(f"ScienceWorld split {split!r}: expected one of {', '.join(SPLITS)}")
    known = catalogue()
    names = list(task_names or sorted(known))
    unknown = [t for t in names if t not in known]
    if unknown:
        raise UserError(f"ScienceWorld task {unknown[0]!r}: not a task name (known: {', '.join(sorted(known))})")
    rng = random.Random(seed)
    queues = {t: rng.sample(known[t][split], len(known[t][split])) for t in names}
    tasks: list[TaskSpec] = []
    while len(tasks) < n and any(queues.values()):
        for t in names:
            if queues[t] and len(tasks) < n:
                v = queues[t].pop(0)
                tasks.append(TaskSpec(task_id=f"sw-{t}-{v}", task_type=t, game=f"{t}/{v}/{simplifications}",
                                      split=split, env="scienceworld"))
    return tasks


def generate_tasks(out_dir: str | Path, split: str, num: int, seed: int, types: Sequence[str] | None = None,
                   workers: int = 1, progress: bool = True, force: bool = False) -> list[TaskSpec]:
    """A task folder of `num` ScienceWorld tasks (`scienceworld_tasks`; split "eval" is ScienceWorld's test split):
    its tasks.jsonl only, written atomically into `out_dir` — absent, empty, or (with `force`) a task folder agentprm
    wrote. The registry's task generator for env "scienceworld" (`workers`, `progress`: nothing to parallelise)."""
    refuse_overwrite(Path(out_dir), force)
    split = "test" if split == "eval" else split
    tasks = [replace(t, seed=seed) for t in scienceworld_tasks(split, num, seed, list(types) if types else None)]
    if len(tasks) < num:
        raise UserError(f"--num {num}: ScienceWorld's {split} split has {len(tasks)} variations of "
                        f"{'these types' if types else 'its task types'}")
    write_manifest(out_dir, tasks, force)
    return tasks
