"""`AlfWorldEnv`: one ALFWorld game on the real TextWorld-PDDL engine, behind the `TextEnv` protocol."""
from __future__ import annotations

import json
import re
from pathlib import Path

from agentprm.envs.alfworld import safe_grammar, speedups
from agentprm.envs.alfworld.expert import expert_wrapper
from agentprm.envs.alfworld.setup import TASK_TYPES, import_alfworld
from agentprm.envs.base import Turn
from agentprm.errors import UserError
from agentprm.io import read_text

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
_TASK_RE = re.compile(r"Your task is to: (.*)$", re.S)
GAME_FIELDS = ("pddl_domain", "grammar", "pddl_problem")
MAX_GAME_BYTES = 64 * 2**20   # read whole: ours are ~100 KB


def game_file_of(path: str | Path) -> Path:
    """Accept a game folder or its game.tw-pddl; check that the files a game needs exist and parse."""
    path = Path(path)
    game = path / GAME_FILE if path.is_dir() else path
    if not game.exists():
        raise UserError(f"{game}: no such game file (a game folder holds {GAME_FILE} and {TRAJ_FILE})")
    try:
        data = json.loads(read_text(game, MAX_GAME_BYTES))
    except json.JSONDecodeError as e:   # (not UTF-8, not a regular file, too large: read_text's errors)
        raise UserError(f"{game}: not valid JSON ({e.msg})") from None
    missing = [f for f in GAME_FIELDS if not isinstance(data, dict) or not data.get(f)]
    if missing:
        raise UserError(f"{game}: missing field '{missing[0]}'")
    return game


def read_traj_data(game: Path) -> dict:
    traj = game.parent / TRAJ_FILE
    if not traj.exists():
        raise UserError(f"{traj}: missing (needed for the task type and the expert)")
    try:
        data = json.loads(read_text(traj, MAX_GAME_BYTES))
    except json.JSONDecodeError as e:
        raise UserError(f"{traj}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):   # a list or a number would fail below with an AttributeError, not a clear line
        raise UserError(f"{traj}: must be a JSON object with a 'task_type' field, got {type(data).__name__}")
    if data.get("task_type") not in TASK_TYPES:
        raise UserError(f"{traj}: field 'task_type' is {data.get('task_type')!r}, not one of {', '.join(TASK_TYPES)}")
    return data


class AlfWorldEnv:
    """One game. `max_steps` bounds an episode (ALFWorld's eval uses 50): at that point `done` with
    `info["truncated"]`. `expert=True` also computes the hand-coded expert's next action each turn
    (`info["expert_action"]`), which costs time; rollouts leave it off."""

    def __init__(self, game: str | Path, *, max_steps: int = 50, task_id: str | None = None, expert: bool = False,
                 fast: bool = True):
        self.game_file = game_file_of(game)
        traj = read_traj_data(self.game_file)
        self.task_type: str = traj["task_type"]
        self.task_id = task_id or self.game_file.parent.name
        self.max_steps = max_steps
        import_alfworld()
        safe_grammar.install()   # a game file's grammar is data: no Python of it is run
        if fast:
            speedups.install()
        import textworld
        from textworld.envs.pddl import PddlEnv
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        wrappers = [AlfredDemangler(shuffle=False), AlfredInfos]
        if expert:
            wrappers.append(expert_wrapper())
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        # PddlEnv named, not textworld.start's guess from the path: it picks the z-machine for any path holding
        # ".z1".."z8" (a folder "runs/v.z3", a temp folder ".x.z5abc.tmp")
        env = PddlEnv(infos)
        for wrapper in wrappers:
            env = wrapper(env)
        env.load(str(self.game_file))
        self._env = env
        self._expert = expert
        self._steps = 0
        self._task = ""

    def _turn(self, state, reward: float, done: bool, info: dict) -> Turn:
        if self._expert:
            info["expert_action"] = state["extra.expert_plan"][0]
        return Turn(task=self._task, observation=state.feedback, admissible=tuple(state.admissible_commands),
                    reward=float(reward), done=done, won=bool(state["won"]), info=info)

    def reset(self) -> Turn:
        state = self._env.reset()
        self._steps = 0
        m = _TASK_RE.search(state.feedback)
        self._task = m.group(1).strip() if m else ""
        self._admissible = set(state.admissible_commands)
        return self._turn(state, 0.0, False, {})

    def step(self, action: str) -> Turn:
        info = {"admissible_action": action.strip() in self._admissible}
        state, score, done = self._env.step(action)
        self._steps += 1
        self._admissible = set(state.admissible_commands)
        won = bool(state["won"])
        if not done and self._steps >= self.max_steps:
            done, info["truncated"] = True, True
        return self._turn(state, 1.0 if won else 0.0, bool(done) or won, info)

    def close(self) -> None:
        self._env.close()
