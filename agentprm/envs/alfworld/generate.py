"""Generate ALFWorld games of all six task types from what the `alfworld` wheel ships (no dataset download).

Inputs (all in the wheel): the floor plans `alfworld/gen/layouts/FloorPlan*-objects.json` (types present) and
`-openable.json` (receptacle instances), `alfworld/gen/constants.py` (which receptacle can hold which object,
heat/cool/clean affordances, which room types suit which task), `alfworld/gen/goal_library.py` (PDDL goal and
sentence templates per task type), and the domain + grammar `alfred.pddl` / `alfred.twl2`.

Synthesised here: object instances (1-3 per pickupable type), their start receptacles, receptacle types a floor
plan has but `-openable.json` omits (stove burners, toaster, garbage can, ...), the desk lamp's place, and one
location per receptacle. Each game is written in ALFWorld's own format (`game.tw-pddl` + `traj_data.json`), with a
walkthrough constructed from the known layout (no planner), and is listed only after that walkthrough has been
replayed through `AlfWorldEnv` (every command admissible, not won at reset, won at the end). A game that fails
is regenerated from another derived seed and the failure is counted.

Determinism: game `index` of a split draws everything from an RNG seeded by (seed, split, index, attempt) and
iterates only sorted collections, so results do not depend on `workers`, on PYTHONHASHSEED or on other games.
Floor plans are assigned to splits once and for all (`split_of`), so train and eval scenes never overlap.
Since game `index` does not depend on `num`, a split of 36 games is the first 36 of a split of 216.

Cache: a verified game is also kept under `game_cache_dir()` (keyed by seed, split, index, type and a digest of
this module and the alfworld version), so a split that was generated once, or any prefix of it, is copied, not
drafted and verified by replay again. Set AGENTPRM_GAME_CACHE=off to bypass it.
See docs/alfworld.md for how generated games differ from the official ones.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from agentprm.envs.alfworld.engine import GAME_FILE, TRAJ_FILE, AlfWorldEnv
from agentprm.envs.alfworld.setup import TASK_TYPES, import_alfworld
from agentprm.envs.alfworld.tasks import MANIFEST, refuse_overwrite
from agentprm.envs.base import TaskSpec
from agentprm.errors import UserError
from agentprm.io import write_text
from agentprm.outputs import atomic_dir
from agentprm.progress import progress_bar

SPLITS = ("train", "eval")
# ALFRED's own held-out scenes (alfworld.gen.constants.TEST_SCENE_NUMBERS): floor plans 1-6 of each room type,
# i.e. 20% of every room type, form the eval split; the other 24 of each type form train.
EVAL_FLOORPLANS = frozenset(base + k for base in (0, 200, 300, 400) for k in range(1, 7))
MAX_ATTEMPTS = 10
MAX_INSTANCES = 3  # ALFRED's MAX_NUM_OF_OBJ_INSTANCES
DESK_LAMP = "DeskLamp"
LAMP_HOSTS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "DiningTable", "CoffeeTable", "TVStand",
                        "CounterTop"})
PLACE_TASKS = frozenset({"pick_and_place_simple", "pick_two_obj_and_place"})
STOVE_BURNERS = 4  # the usual AI2-THOR stove; -openable.json never lists burners
AGENT_START = "loc|-99|-99|0|30"  # a location at no receptacle: "You are in the middle of a room."
_MANGLE = {"|": "_bar_", "-": "_minus_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


@dataclass(frozen=True)
class Station:
    """The receptacle a state-change task uses, the verb of its command and the affordance it needs."""
    verb: str
    receptacle: str
    affordance: str


STATIONS = {
    "pick_clean_then_place_in_recep": Station("clean", "SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": Station("heat", "Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": Station("cool", "Fridge", "Coolable"),
}


# ---------------------------------------------------------------------------------------------------- the wheel


@dataclass(frozen=True)
class Alfred:
    """What the generator reads from the alfworld wheel (loaded once, after `import_alfworld`)."""
    layouts: Path
    domain: str
    grammar: str
    object_types: tuple[str, ...]       # every otype the problem declares (ALFRED: objects minus static receptacles)
    receptacle_types: tuple[str, ...]   # every rtype (static receptacles)
    pickupable: frozenset[str]          # object types some receptacle can hold (sliced variants excluded)
    can_contain: dict[str, frozenset[str]]
    affordances: dict[str, frozenset[str]]
    openable: frozenset[str]
    movable_receptacles: frozenset[str]
    room_types: dict[str, tuple[int, ...]]
    task_rooms: dict[str, frozenset[str]]
    goals: dict[str, dict]


@lru_cache(maxsize=1)
def alfred() -> Alfred:
    import_alfworld()
    import alfworld.gen.constants as C
    import alfworld.gen.goal_library as goal_library
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    static = frozenset(C.RECEPTACLES) - C.MOVABLE_RECEPTACLES_SET
    held = {o for objs in C.VAL_RECEPTACLE_OBJECTS.values() for o in objs if "Sliced" not in o}
    return Alfred(
        layouts=Path(C.__file__).parent / "layouts",
        domain=Path(ALFRED_PDDL_PATH).read_text(),
        grammar=Path(ALFRED_TWL2_PATH).read_text(),
        object_types=tuple(sorted((set(C.OBJECTS) | C.MOVABLE_RECEPTACLES_SET) - static)),
        receptacle_types=tuple(sorted(static)),
        pickupable=frozenset(held),
        can_contain={r: frozenset(objs) for r, objs in C.VAL_RECEPTACLE_OBJECTS.items()},
        affordances={k: frozenset(v) for k, v in C.VAL_ACTION_OBJECTS.items()},
        openable=frozenset(C.OPENABLE_CLASS_SET),
        movable_receptacles=frozenset(C.MOVABLE_RECEPTACLES_SET),
        room_types={room: tuple(numbers) for room, numbers in C.SCENE_TYPE.items()},
        task_rooms={task: frozenset(rooms) for task, rooms in C.GOALS_VALID.items()},
        goals={task: goal_library.gdict[task] for task in TASK_TYPES},
    )


# ---------------------------------------------------------------------------------------------------- scenes


@dataclass(frozen=True)
class Receptacle:
    id: str     # ALFRED object id, e.g. "Cabinet|+00.68|+00.50|-02.20"
    type: str


@dataclass(frozen=True)
class Item:
    id: str
    type: str
    host: str   # id of the receptacle it starts in


@dataclass(frozen=True)
class Scene:
    floorplan: int
    room: str
    object_types: tuple[str, ...]        # pickupable types present
    receptacles: tuple[Receptacle, ...]
    has_desk_lamp: bool

    def receptacle_types(self) -> list[str]:
        return sorted({r.type for r in self.receptacles})


def floorplans() -> list[int]:
    return sorted(int(p.name[len("FloorPlan"):-len("-objects.json")])
                  for p in alfred().layouts.glob("FloorPlan*-objects.json"))


def split_of(floorplan: int) -> str:
    return "eval" if floorplan in EVAL_FLOORPLANS else "train"


def room_of(floorplan: int) -> str:
    return next(room for room, numbers in alfred().room_types.items() if floorplan in numbers)


def receptacle_type(receptacle_id: str) -> str:
    """'Cabinet|x|y|z' -> Cabinet; 'Sink|x|y|z|SinkBasin' -> SinkBasin. Basins are typed from the id's prefix
    because the engine names them that way ("bathtubbasin"), and FloorPlan420 labels its bathtub 'SinkBasin'."""
    parts = receptacle_id.split("|")
    return parts[0] + "Basin" if len(parts) == 5 else parts[0]


def synthesised_receptacles(rtype: str) -> list[Receptacle]:
    """Receptacles of a type the floor plan has but -openable.json omits, with placeholder coordinates. Basins
    keep ALFRED's 'Sink|x|y|z|SinkBasin' form so the engine names them 'sinkbasin 1'."""
    coordinates = [f"+{90 + k}.00|+00.00|+00.00" for k in range(STOVE_BURNERS if rtype == "StoveBurner" else 1)]
    if rtype.endswith("Basin"):
        return [Receptacle(f"{rtype.removesuffix('Basin')}|{c}|{rtype}", rtype) for c in coordinates]
    return [Receptacle(f"{rtype}|{c}", rtype) for c in coordinates]


@lru_cache(maxsize=None)
def load_scene(floorplan: int) -> Scene:
    a = alfred()
    present = set(json.loads((a.layouts / f"FloorPlan{floorplan}-objects.json").read_text()))
    listed = json.loads((a.layouts / f"FloorPlan{floorplan}-openable.json").read_text())
    static = set(a.receptacle_types)
    receptacles = [Receptacle(rid, receptacle_type(rid)) for rid in sorted(listed)]
    receptacles = [r for r in receptacles if r.type in static]
    for rtype in sorted((present & static) - {r.type for r in receptacles}):
        receptacles += synthesised_receptacles(rtype)
    return Scene(floorplan=floorplan, room=room_of(floorplan), object_types=tuple(sorted(present & a.pickupable)),
                 receptacles=tuple(receptacles), has_desk_lamp=DESK_LAMP in present)


# ---------------------------------------------------------------------------------------------------- goals


@dataclass(frozen=True)
class GoalSpec:
    task_type: str
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""

    def pddl_params(self) -> dict:
        return {"object_target": self.object_target, "parent_target": self.parent_target,
                "toggle_target": self.toggle_target, "mrecep_target": "", "object_sliced": False}


def start_hosts(scene: Scene, otype: str, goal: GoalSpec) -> list[Receptacle]:
    """Receptacles an object of `otype` may start in. The target of a place task never starts in a receptacle
    of the goal's type, or the game would be (half) won at reset."""
    can_hold = [r for r in scene.receptacles if otype in alfred().can_contain.get(r.type, ())]
    if goal.task_type in PLACE_TASKS and otype == goal.object_target:
        return [r for r in can_hold if r.type != goal.parent_target]
    return can_hold


def goal_options(scene: Scene, task_type: str) -> list[GoalSpec]:
    """Every goal of `task_type` this scene supports (ALFRED's object/receptacle filters are not applied)."""
    a = alfred()
    if scene.room not in a.task_rooms[task_type]:
        return []
    rtypes = scene.receptacle_types()
    if task_type == "look_at_obj_in_light":
        if not (scene.has_desk_lamp and LAMP_HOSTS.intersection(rtypes)):
            return []
        goals = [GoalSpec(task_type, o, toggle_target=DESK_LAMP) for o in scene.object_types]
    else:
        objects, station = scene.object_types, STATIONS.get(task_type)
        if station:
            if station.receptacle not in rtypes:
                return []
            objects = tuple(o for o in objects if o in a.affordances[station.affordance])
        goals = [GoalSpec(task_type, o, r) for o in objects for r in rtypes
                 if o in a.can_contain.get(r, ()) and not (station and r == station.receptacle)]
    return [g for g in goals if start_hosts(scene, g.object_target, g)]


@lru_cache(maxsize=None)
def candidate_floorplans(split: str, task_type: str) -> tuple[int, ...]:
    return tuple(fp for fp in floorplans() if split_of(fp) == split and goal_options(load_scene(fp), task_type))


def task_sentence(goal: GoalSpec, rng: random.Random) -> str:
    """alfworld's `get_templated_task_desc`, but drawing the template from our RNG (upstream uses the global
    `random`, which would make games depend on unrelated state)."""
    template = rng.choice(alfred().goals[goal.task_type]["templates"])
    return template.format(obj=goal.object_target.lower(), recep=goal.parent_target.lower(),
                           toggle=goal.toggle_target.lower(), mrecep="")


# ---------------------------------------------------------------------------------------------------- placement


def place_items(scene: Scene, goal: GoalSpec, rng: random.Random) -> list[Item]:
    items: list[Item] = []
    for otype in scene.object_types:
        hosts = start_hosts(scene, otype, goal)
        if not hosts:
            continue
        count = rng.randint(1, MAX_INSTANCES)
        if otype == goal.object_target and goal.task_type == "pick_two_obj_and_place":
            count = max(count, 2)
        for _ in range(count):
            items.append(Item(_item_id(otype, len(items)), otype, rng.choice(hosts).id))
    if scene.has_desk_lamp:
        hosts = [r for r in scene.receptacles if r.type in LAMP_HOSTS]
        if hosts:
            items.append(Item(_item_id(DESK_LAMP, len(items)), DESK_LAMP, rng.choice(hosts).id))
    return items


def _item_id(otype: str, n: int) -> str:
    return f"{otype}|+{n:02d}.00|+00.00|+00.00"  # unique placeholder coordinates in ALFRED's id format


# ---------------------------------------------------------------------------------------------------- game files


def mangle(alfred_id: str) -> str:
    """ALFRED's `fix_pddl_str_chars` for ids: 'Apple|+01.00' -> 'Apple_bar__plus_01_dot_00'."""
    return "".join(_MANGLE.get(ch, ch) for ch in alfred_id)


def pddl_problem(name: str, scene: Scene, items: Sequence[Item], goal: GoalSpec) -> str:
    a = alfred()
    location = {r.id: f"loc|{i}|0|0|30" for i, r in enumerate(scene.receptacles)}  # one location per receptacle
    declare = ["agent1 - agent"]
    declare += [f"{t}Type - otype" for t in a.object_types] + [f"{t}Type - rtype" for t in a.receptacle_types]
    declare += [f"{mangle(i.id)} - object" for i in items] + [f"{mangle(r.id)} - receptacle" for r in scene.receptacles]
    declare += [f"{mangle(loc)} - location" for loc in [*location.values(), AGENT_START]]
    facts = [f"(atLocation agent1 {mangle(AGENT_START)})"]
    for r in scene.receptacles:
        facts += [f"(receptacleType {mangle(r.id)} {r.type}Type)",
                  f"(receptacleAtLocation {mangle(r.id)} {mangle(location[r.id])})"]
        facts += [f"(openable {mangle(r.id)})"] if r.type in a.openable else []
    for rtype in scene.receptacle_types():
        facts += [f"(canContain {rtype}Type {o}Type)" for o in sorted(a.can_contain.get(rtype, ())) if o in a.object_types]
    for item in items:
        facts += _item_facts(item, location[item.host])
    pddl_goal = a.goals[goal.task_type]["pddl"].format(obj=goal.object_target, recep=goal.parent_target,
                                                       toggle=goal.toggle_target, mrecep="").replace("#", "-")
    indent = "\n        "
    return (f"(define (problem {name})\n(:domain alfred)\n(:objects{indent}{indent.join(declare)}\n        )\n"
            f"(:init{indent}{indent.join(facts)}\n        )\n{pddl_goal}")


def _item_facts(item: Item, location: str) -> list[str]:
    a, m = alfred(), mangle(item.id)
    facts = [f"(objectType {m} {item.type}Type)", f"(inReceptacle {m} {mangle(item.host)})",
             f"(objectAtLocation {m} {mangle(location)})"]
    facts += [f"(pickupable {m})"] if item.type in a.pickupable else []
    facts += [f"(isReceptacleObject {m})"] if item.type in a.movable_receptacles else []
    for predicate, affordance in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                                  ("toggleable", "Toggleable"), ("sliceable", "Sliceable")):
        facts += [f"({predicate} {m})"] if item.type in a.affordances[affordance] else []
    return facts


def traj_data(goal: GoalSpec, floorplan: int) -> dict:
    return {"task_type": goal.task_type, "pddl_params": goal.pddl_params(),
            "scene": {"floor_plan": f"FloorPlan{floorplan}"}, "turk_annotations": {"anns": []}}


# ---------------------------------------------------------------------------------------------------- walkthrough


def display_names(alfred_ids: Iterable[str]) -> dict[str, str]:
    """The names the engine shows ('cabinet 3'): alfworld's own Demangler over the ids as Fast Downward sees them."""
    from alfworld.agents.utils.misc import Demangler

    pddl_ids = {i: mangle(i).lower() for i in alfred_ids}
    infos = {p: _EntityId(p) for p in pddl_ids.values()}
    demangler = Demangler(game_infos=infos)
    return {i: demangler.demangle_alfred_name(p).strip() for i, p in pddl_ids.items()}


@dataclass(frozen=True)
class _EntityId:
    id: str  # Demangler only reads `.id` from textworld's EntityInfo


class _Walker:
    """Writes commands while tracking where the agent is and what is open, so every command is admissible."""

    def __init__(self, scene: Scene, items: Sequence[Item]):
        self.type_of = {r.id: r.type for r in scene.receptacles}
        self.name = display_names([*self.type_of, *(i.id for i in items)])
        self.host = {i.id: i.host for i in items}
        self.at: str | None = None
        self.opened: set[str] = set()
        self.commands: list[str] = []

    def go(self, receptacle: str) -> None:
        if self.at != receptacle:  # "go to X" is not admissible when already at X
            self.commands.append(f"go to {self.name[receptacle]}")
            self.at = receptacle

    def reach_inside(self, receptacle: str) -> None:
        self.go(receptacle)
        if self.type_of[receptacle] in alfred().openable and receptacle not in self.opened:
            self.commands.append(f"open {self.name[receptacle]}")
            self.opened.add(receptacle)

    def take(self, item: str) -> None:
        self.reach_inside(self.host[item])
        self.commands.append(f"take {self.name[item]} from {self.name[self.host[item]]}")

    def use_station(self, item: str, verb: str, station: str) -> None:
        self.go(station)
        self.commands.append(f"{verb} {self.name[item]} with {self.name[station]}")

    def move(self, item: str, receptacle: str) -> None:
        self.reach_inside(receptacle)
        self.commands.append(f"move {self.name[item]} to {self.name[receptacle]}")
        self.host[item] = receptacle

    def use(self, lamp: str) -> None:
        self.go(self.host[lamp])
        self.commands.append(f"use {self.name[lamp]}")


def walkthrough(scene: Scene, items: Sequence[Item], goal: GoalSpec) -> list[str]:
    """A plan written from the known layout: fetch the target(s), change state at the station, put them away."""
    walker = _Walker(scene, items)
    targets = [i.id for i in items if i.type == goal.object_target]
    if goal.task_type == "look_at_obj_in_light":
        walker.take(targets[0])
        walker.use(next(i.id for i in items if i.type == goal.toggle_target))
        return walker.commands
    first_of = {t: min(r.id for r in scene.receptacles if r.type == t) for t in scene.receptacle_types()}
    station = STATIONS.get(goal.task_type)
    for target in targets[:2 if goal.task_type == "pick_two_obj_and_place" else 1]:
        walker.take(target)
        if station:
            walker.use_station(target, station.verb, first_of[station.receptacle])
        walker.move(target, first_of[goal.parent_target])
    return walker.commands


# ---------------------------------------------------------------------------------------------------- one game


@dataclass(frozen=True)
class GameJob:
    seed: int
    split: str
    index: int
    task_type: str


@dataclass(frozen=True)
class GameDraft:
    name: str           # folder name: split, index, type and a seed-derived id
    floorplan: int
    goal: GoalSpec
    game: dict          # game.tw-pddl content
    traj: dict          # traj_data.json content


@dataclass(frozen=True)
class GameResult:
    task: TaskSpec
    failures: tuple[str, ...]   # why earlier attempts were rejected


def game_rng(job: GameJob, attempt: int) -> tuple[random.Random, str]:
    """An RNG private to (seed, split, index, attempt), and a short id derived from the same digest."""
    digest = hashlib.sha256(f"{job.seed}/{job.split}/{job.index}/{attempt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")), digest.hex()[:8]


def draft_game(job: GameJob, attempt: int) -> GameDraft:
    rng, game_id = game_rng(job, attempt)
    floorplan = rng.choice(candidate_floorplans(job.split, job.task_type))
    scene = load_scene(floorplan)
    goal = rng.choice(goal_options(scene, job.task_type))
    items = place_items(scene, goal, rng)
    name = f"{job.split}-{job.index:05d}-{job.task_type}-{game_id}"
    game = {"pddl_domain": alfred().domain,
            "grammar": alfred().grammar.replace("UNKNOWN GOAL", task_sentence(goal, rng)),  # add_task_to_grammar
            "pddl_problem": pddl_problem(f"plan_{game_id}", scene, items, goal),
            "solvable": False,  # set once the walkthrough has been replayed
            "walkthrough": walkthrough(scene, items, goal)}
    return GameDraft(name, floorplan, goal, game, traj_data(goal, floorplan))


def write_game(folder: Path, draft: GameDraft, solvable: bool) -> None:
    """Plain writes: the folder is a hidden staging folder until it is renamed into place."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / GAME_FILE).write_text(json.dumps({**draft.game, "solvable": solvable}))
    (folder / TRAJ_FILE).write_text(json.dumps(draft.traj))


def replay(folder: Path, commands: Sequence[str]) -> tuple[str | None, str]:
    """Play `commands` through the engine. Returns (failure reason or None, the task sentence the engine shows)."""
    try:
        env = AlfWorldEnv(folder, max_steps=len(commands) + 1)
    except SystemExit as e:  # Fast Downward exits the process on a problem it cannot translate
        return f"engine exit ({e.code})", ""
    try:
        turn = env.reset()
        if turn.won:
            return "won at reset", turn.task
        for step, command in enumerate(commands, 1):
            if command not in turn.admissible:
                return f"step {step}: {command!r} not admissible", turn.task
            turn = env.step(command)
            if turn.won and step < len(commands):
                return f"won early, at step {step}", turn.task
        return (None if turn.won else "not won after the walkthrough"), turn.task
    except SystemExit as e:
        return f"engine exit ({e.code})", ""
    finally:
        env.close()


def make_game(job: GameJob, out_dir: Path) -> GameResult:
    """Draft, write, verify; regenerate from the next derived seed until a game verifies."""
    failures: list[str] = []
    for attempt in range(MAX_ATTEMPTS):
        draft = draft_game(job, attempt)
        staging = out_dir / f".{draft.name}.tmp"  # hidden and unsolvable until verified
        try:
            write_game(staging, draft, solvable=False)
            failure, sentence = replay(staging, draft.game["walkthrough"])
            if failure is None:
                return GameResult(_publish(staging, out_dir / draft.name, draft, sentence, job), tuple(failures))
            failures.append(f"{draft.name}: {failure}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    raise RuntimeError(f"game {job.index} ({job.task_type}): no verified game in {MAX_ATTEMPTS} attempts: "
                       + "; ".join(failures))


def _publish(staging: Path, final: Path, draft: GameDraft, sentence: str, job: GameJob) -> TaskSpec:
    write_game(staging, draft, solvable=True)
    shutil.rmtree(final, ignore_errors=True)  # a leftover from an interrupted or --force run
    staging.rename(final)
    return TaskSpec(task_id=draft.name, task_type=job.task_type, game=str(final.resolve()), split=job.split,
                    floorplan=draft.floorplan, goal=sentence, walkthrough_len=len(draft.game["walkthrough"]),
                    seed=job.seed)


# ---------------------------------------------------------------------------------------------------- many games


@dataclass(frozen=True)
class Generation:
    tasks: list[TaskSpec]
    failures: list[str]     # rejected drafts, each regenerated
    seconds: float


def check_request(split: str, num: int, types: Sequence[str] | None) -> tuple[str, ...]:
    if split not in SPLITS:
        raise UserError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    if num < 1:
        raise UserError(f"num must be at least 1 (got {num})")
    types = tuple(types) if types else TASK_TYPES
    bad = [t for t in types if t not in TASK_TYPES]
    if bad:
        raise UserError(f"types: unknown task type {bad[0]!r}; known: {', '.join(TASK_TYPES)}")
    return types


GAME_BYTES = 100_000   # a generated game folder takes ~85 KB (216 games: 18.3 MB); rounded up


def check_space(out_dir: Path, num: int) -> None:
    """Refuse a request the disk cannot hold before any game is written (`--num 2000000000` would fill it)."""
    where = next(p for p in (out_dir.absolute(), *out_dir.absolute().parents) if p.exists())
    free, need = shutil.disk_usage(where).free, num * GAME_BYTES
    if need > free:
        raise UserError(f"{out_dir}: {num} games need about {need / 1e9:.1f} GB and {where} has {free / 1e9:.1f} GB "
                        "free; ask for fewer games")


def plan_jobs(seed: int, split: str, num: int, types: Sequence[str]) -> list[GameJob]:
    """Round robin over the requested types, so every type gets num/len(types) games (±1)."""
    return [GameJob(seed, split, index, types[index % len(types)]) for index in range(num)]


def generate(out_dir: str | Path, split: str, num: int, seed: int, types: Sequence[str] | None = None,
             workers: int = 1, progress: bool = True, force: bool = False) -> Generation:
    """Generate `num` verified games into a fresh folder, with its `tasks.jsonl` once all are verified, and swap it
    into `out_dir`: absent, empty, or (with `force`) a task folder agentprm generated and nobody changed since."""
    types = check_request(split, num, types)
    out_dir = Path(out_dir)
    check_space(out_dir, num)
    refuse_overwrite(out_dir, force)
    started = time.perf_counter()
    results: list[GameResult] = []
    with atomic_dir(out_dir, kind="tasks") as tmp, \
            progress_bar(num, f"generating {split} games", enabled=progress) as bar:
        for result in _run(plan_jobs(seed, split, num, types), tmp.resolve(), workers):
            results.append(result)
            bar.advance()
        write_text(tmp / MANIFEST, "".join(json.dumps(r.task.to_row(tmp.resolve())) + "\n" for r in results))
    final = out_dir.resolve()
    tasks = [dataclasses.replace(r.task, game=str(final / Path(r.task.game).name)) for r in results]
    return Generation(tasks, [f for r in results for f in r.failures], time.perf_counter() - started)


def generate_tasks(out_dir: str | Path, split: str, num: int, seed: int, types: Sequence[str] | None = None,
                   workers: int = 1, progress: bool = True, force: bool = False) -> list[TaskSpec]:
    return generate(out_dir, split, num, seed, types, workers, progress, force).tasks


def _run(jobs: list[GameJob], out_dir: Path, workers: int) -> Iterator[GameResult]:
    """Games in job order, cached ones copied. Workers are spawned, not forked: each gets a clean engine and its
    own sys.argv."""
    cache = game_cache_dir()
    cached = {job: _from_cache(cache, job, out_dir) for job in jobs} if cache else {}
    todo = [job for job in jobs if cached.get(job) is None]
    workers = max(1, min(workers, len(todo)))
    if workers == 1:
        made = (make_game(job, out_dir) for job in todo)
    else:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        made = pool.map(make_game, todo, [out_dir] * len(todo))
    try:
        for job in jobs:
            result = cached.get(job)
            if result is None:
                result = next(made)
                if cache:
                    _to_cache(cache, job, result)
            yield result
    finally:
        if workers > 1:
            pool.shutdown(cancel_futures=True)


def game_cache_dir() -> Path | None:
    """$AGENTPRM_GAME_CACHE ("off" disables it), else <XDG cache>/agentprm/games; one sub-folder per generator
    version (a digest of this file and the alfworld version), so an edit to the generator never serves old games."""
    root = os.environ.get("AGENTPRM_GAME_CACHE")
    if root == "off":
        return None
    base = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentprm" / "games"
    return base / _generator_digest()


@lru_cache(maxsize=1)
def _generator_digest() -> str:
    try:
        alfworld_version = metadata.version("alfworld")
    except metadata.PackageNotFoundError:
        alfworld_version = "?"
    return hashlib.sha256(Path(__file__).read_bytes() + alfworld_version.encode()).hexdigest()[:16]


def _cache_key(job: GameJob) -> str:
    return f"{job.split}-s{job.seed}-{job.index:05d}-{job.task_type}"


def _from_cache(cache: Path, job: GameJob, out_dir: Path) -> GameResult | None:
    entry = cache / _cache_key(job)
    try:
        spec = json.loads((entry / "task.json").read_text())
        failures = tuple(spec.pop("failures", ()))
        task = TaskSpec(**{**spec, "game": ""})
        if not _is_game_name(task.task_id, job) or (task.split, task.task_type) != (job.split, job.task_type):
            return None   # the entry is data from outside: its id names folders written here, so only this job's own
        src = entry / task.task_id
        if not ((src / GAME_FILE).is_file() and (src / TRAJ_FILE).is_file()):
            return None
        staging, final = out_dir / f".{task.task_id}.tmp", out_dir / task.task_id
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(src, staging)
        shutil.rmtree(final, ignore_errors=True)  # a leftover from an interrupted or --force run
        staging.rename(final)
    except (OSError, ValueError, KeyError, TypeError):   # absent, unreadable or half-written: generate it instead
        return None
    return GameResult(dataclasses.replace(task, game=str(final.resolve())), failures)


def _is_game_name(name: object, job: GameJob) -> bool:
    """Whether `name` is a game name `draft_game` gives `job` (one plain path component)."""
    prefix = f"{job.split}-{job.index:05d}-{job.task_type}-"
    return isinstance(name, str) and name.startswith(prefix) and bool(re.fullmatch(r"[0-9a-f]+", name[len(prefix):]))


def _to_cache(cache: Path, job: GameJob, result: GameResult) -> None:
    """Best effort (a read-only cache only costs speed): written to a hidden folder, renamed into place."""
    entry = cache / _cache_key(job)
    staging = cache / f".{_cache_key(job)}.{os.getpid()}.tmp"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(result.task.game, staging / result.task.task_id)
        spec = {**asdict(result.task), "failures": list(result.failures)}
        spec.pop("game")
        (staging / "task.json").write_text(json.dumps(spec))
        shutil.rmtree(entry, ignore_errors=True)
        staging.rename(entry)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
