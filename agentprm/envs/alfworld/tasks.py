"""The task catalogue: which games a split holds, from our generator's manifest or from official ALFWorld data.

Generated folders carry `tasks.jsonl`, one row per game (schema below). A folder without it is read the way
upstream ALFWorld reads its data: every sub-folder with `traj_data.json` + `game.tw-pddl` whose game is marked
`solvable` is a task (so `--alfworld-data $ALFWORLD_DATA/json_2.1.1/valid_unseen` works unchanged). Such a task's
split is the official split folder on its path (train, valid_seen, ...), or "" when there is none.

tasks.jsonl row: task_id (str, unique; the game folder's name), task_type (one of TASK_TYPES), split
("train"|"eval"), floorplan (int, the AI2-THOR floor plan; train and eval never share one), goal (the task sentence
as the engine shows it), game (game folder, relative to the manifest), walkthrough_len (int, commands in the verified
walkthrough), seed (int, the --seed of the generating run). Written by `agentprm.envs.alfworld.generate`.

A row of another registered environment carries `env` (e.g. "scienceworld", written by envs/scienceworld.py): its
`task_type` is that env's and its `game` a name the env resolves (no folder), so only the fields' types and the
unique task_id are checked here; the env checks its game when it starts.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from agentprm.envs.alfworld.engine import GAME_FILE, TRAJ_FILE
from agentprm.envs.alfworld.setup import TASK_TYPES
from agentprm.envs.base import TaskSpec
from agentprm.errors import UserError
from agentprm.io import parse_json, read_text, write_text
from agentprm.outputs import atomic_dir, owner_record

MANIFEST = "tasks.jsonl"
REQUIRED = ("task_id", "task_type", "game")
OFFICIAL_SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")


def refuse_overwrite(out_dir: Path, force: bool) -> None:
    """A task generator's one-line refusal to replace a task folder agentprm wrote, unless `force` (a folder agentprm
    did not write is refused by `atomic_dir` whatever `force` says)."""
    if owner_record(out_dir) and (out_dir / MANIFEST).exists() and not force:
        raise UserError(f"{out_dir / MANIFEST} already exists; choose another --out or pass --force to replace the "
                        "folder agentprm generated there")


def write_manifest(out_dir: str | Path, tasks: list[TaskSpec], force: bool = False) -> None:
    """A task folder that is its tasks.jsonl alone (an env whose games are names or level strings, not folders),
    written atomically into `out_dir`: absent, empty, or (with `force`) a task folder agentprm wrote."""
    out_dir = Path(out_dir)
    refuse_overwrite(out_dir, force)
    with atomic_dir(out_dir, kind="tasks") as tmp:
        write_text(tmp / MANIFEST, "".join(json.dumps(t.to_row(tmp)) + "\n" for t in tasks))


def check_types(types, known=TASK_TYPES) -> tuple[str, ...]:
    bad = [t for t in types if t not in known]
    if bad:
        raise UserError(f"unknown task type {bad[0]!r}; known: {', '.join(known)}")
    return tuple(types)


def load_tasks(root: str | Path, types=None) -> list[TaskSpec]:
    root = Path(root)
    if not root.exists():   # a config's "$ALFWORLD_DATA/json_2.1.1"; a real folder named "$HOME dollar" is itself
        root = Path(os.path.expandvars(str(root)))
    if not root.is_dir():
        raise UserError(f"{root}: no such task folder")
    manifest = root / MANIFEST
    tasks = _read_manifest(manifest) if manifest.exists() else _walk_official(root)
    if types:   # ALFWorld's types, or those of the other env's tasks in this folder
        alfworld = all(t.env == "alfworld" for t in tasks)
        types = check_types(types) if alfworld else check_types(types, sorted({t.task_type for t in tasks}))
        tasks = [t for t in tasks if t.task_type in types]
    if not tasks:
        raise UserError(f"{root}: no games found (expected {MANIFEST}, or sub-folders with {TRAJ_FILE} + {GAME_FILE})")
    return tasks


def _read_manifest(manifest: Path) -> list[TaskSpec]:
    tasks, seen = [], set()
    for lineno, line in enumerate(read_text(manifest).splitlines(), 1):
        if not line.strip():
            continue
        row = parse_json(line, f"{manifest}:{lineno}")
        if not isinstance(row, dict):
            raise UserError(f"{manifest}:{lineno}: must be a JSON object, got {type(row).__name__}")
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise UserError(f"{manifest}:{lineno}: missing field '{missing[0]}'")
        row = {k: v for k, v in row.items() if k in TaskSpec.__dataclass_fields__}
        for name, value in row.items():   # each field of the type TaskSpec declares (a bool is not an int here)
            kind = str if TaskSpec.__dataclass_fields__[name].type == "str" else int
            if not isinstance(value, kind) or isinstance(value, bool):
                raise UserError(f"{manifest}:{lineno}: field '{name}' must be {'a string' if kind is str else 'an integer'}"
                                f", got {value!r}")
        if row.get("env", "alfworld") == "alfworld":   # another env's game is a name that env resolves, not a folder
            row["game"] = str(_game_folder(manifest, lineno, row))
        if row["task_id"] in seen:
            raise UserError(f"{manifest}:{lineno}: field 'task_id' {row['task_id']!r} is repeated")
        seen.add(row["task_id"])
        tasks.append(TaskSpec(**row))
    return tasks


def _game_folder(manifest: Path, lineno: int, row: dict) -> Path:
    """An ALFWorld row's task type and game folder checked; the folder, resolved."""
    if row["task_type"] not in TASK_TYPES:
        raise UserError(f"{manifest}:{lineno}: field 'task_type' is {row['task_type']!r}, not a known type")
    # a game is data of this tasks folder: a path out of it (../, absolute) is refused, not followed
    folder = manifest.parent.absolute()
    game = Path(os.path.normpath(folder / row["game"]))
    if not game.is_relative_to(folder) or game == folder or not game.resolve().is_relative_to(folder.resolve()):
        raise UserError(f"{manifest}:{lineno}: field 'game' {row['game']!r} is outside the tasks folder"
                        + (" (through a symbolic link)" if game.is_relative_to(folder) and game != folder else ""))
    if not game.is_dir():
        raise UserError(f"{manifest}:{lineno}: field 'game': no game folder {row['game']!r}")
    return game.resolve()


def _walk_official(root: Path) -> list[TaskSpec]:
    tasks = []
    for traj in sorted(root.rglob(TRAJ_FILE)):
        game = traj.parent / GAME_FILE
        if not game.exists():
            continue
        info, game_data = _read_json(traj), _read_json(game)
        solvable = game_data.get("solvable", False)
        if not solvable or info.get("task_type") not in TASK_TYPES:
            continue
        rel = traj.parent.relative_to(root)
        scene = info.get("scene")
        plan = scene.get("floor_plan") if isinstance(scene, dict) else None
        digits = re.search(r"-?\d+", plan) if isinstance(plan, str) else None   # "FloorPlan301" -> 301
        split = next((p for p in reversed(traj.parent.parts) if p in OFFICIAL_SPLITS), "")
        tasks.append(TaskSpec(task_id=str(rel), task_type=info["task_type"], game=str(traj.parent.resolve()),
                              split=split, floorplan=int(digits.group()) if digits else -1))
    return tasks


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a JSON object, got {type(data).__name__}")
    return data
