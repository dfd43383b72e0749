"""Sokoban in text (Junghanns & Schaeffer's benchmark of planning with dead ends; verl-agent, RAGEN and AgentGym
train agents on it): push every box onto a target, moving one cell a turn. Pure Python, deterministic and replayable,
so branching, beam search and the Monte-Carlo oracle work on it; a level is solved optimally by breadth-first search,
which is both the generator's check and the expert.

    agentprm tasks generate --env sokoban --split train --num 400 --seed 0 --out sokoban-train
    env = SokobanEnv(parse_level("#####|#@$.#|#####"), max_steps=30)

**A level** is written in the XSB notation of Sokoban collections, rows joined by "|": `#` wall, ` ` floor, `@` the
player, `$` a box, `.` a target, `*` a box on a target, `+` the player on a target. A task's `game` is that string,
so a task folder (tasks.jsonl) holds its levels and you can write your own (rows with env "sokoban").

**A turn**: `task` "Push the <n> boxes onto the <n> targets."; `observation` two lines that say where the loose
boxes and the free targets lie from the player, in moves ("Boxes: 1 down 1 left; 2 down", "Targets: 1 up 1 right"),
then the grid, one row a line and one cell a token (`#` wall, `_` floor, `@`/`+` player, `$` box, `.` target, `*` box
on target; cells separated by spaces, so a word-level tokenizer reads one cell as one token) — after a move that
changed nothing, preceded by "Nothing happens." (the two lines spare a small model from locating the player in a
flattened grid). `admissible` the moves that change the state, of "up", "down", "left", "right" (a move into a
wall, or pushing a box into a wall or another box, is not). Reward 1 when the last box reaches a target (won, done); otherwise 0, and
the episode is cut at `max_steps` (`info["truncated"]`). A level can be lost for good — a box pushed into a corner
that is not a target — which is what a critic has to learn to see: the episode goes on until its step budget.

**Expert**: `info["expert_action"]` is the next move of a shortest solution from the current state (planned at
reset, re-planned when the player leaves the plan); absent from a state with no solution.

**Generation** (`sokoban_tasks`): a square room of `room`×`room` floor cells inside walls, `walls` random interior
walls (floor kept connected), then targets, boxes and the player on random floor cells; kept when breadth-first
search solves it in `min_moves`..`max_moves` moves. Task types are the box counts ("boxes-1", "boxes-2", ...), spread
round-robin. Train and eval never share a level: a level belongs to one split by a hash of its text (1 in 5 to eval).
"""
from __future__ import annotations

import hashlib
import random
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from agentprm.envs.alfworld.tasks import write_manifest
from agentprm.envs.base import TaskSpec, Turn
from agentprm.errors import UserError

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
TYPES = ("boxes-1", "boxes-2", "boxes-3")
DEFAULT_TYPES = ("boxes-1", "boxes-2")
NOTHING = "Nothing happens."
_EVAL_BUCKETS = 5   # a level is eval's when the hash of its text is 0 modulo this, train's otherwise

Cell = tuple[int, int]


@dataclass(frozen=True)
class Level:
    walls: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell
    height: int
    width: int

    def text(self) -> str:
        """The level in XSB notation, rows joined by "|" (a task's `game`)."""
        return "|".join("".join(_xsb(self, (r, c)) for c in range(self.width)).rstrip()
                        for r in range(self.height))


def _xsb(level: Level, cell: Cell) -> str:
    if cell in level.walls:
        return "#"
    box, target = cell in level.boxes, cell in level.targets
    if cell == level.player:
        return "+" if target else "@"
    return "*" if box and target else "$" if box else "." if target else " "


def parse_level(game: str) -> Level:
    """The `Level` of an XSB string (rows joined by "|" or newlines); a one-line error for one that cannot be played."""
    rows = game.replace("\n", "|").split("|")
    walls, targets, boxes, players = set(), set(), set(), []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch not in "# @+$*.-_":
                raise UserError(f"Sokoban level {game!r}: unknown cell {ch!r} (XSB: # wall, space floor, @ player, "
                                "$ box, . target, * box on target, + player on target)")
            if ch == "#":
                walls.add((r, c))
            if ch in "@+":
                players.append((r, c))
            if ch in "$*":
                boxes.add((r, c))
            if ch in ".*+":
                targets.add((r, c))
    if len(players) != 1 or not boxes or len(boxes) != len(targets):
        raise UserError(f"Sokoban level {game!r}: needs one player and as many boxes as targets (found "
                        f"{len(players)} player(s), {len(boxes)} box(es), {len(targets)} target(s))")
    return Level(frozenset(walls), frozenset(targets), frozenset(boxes), players[0], len(rows),
                 max(len(row) for row in rows))


def move(level: Level, boxes: frozenset[Cell], player: Cell, action: str) -> tuple[frozenset[Cell], Cell] | None:
    """(boxes, player) after `action`, or None when it changes nothing (a wall, or a box that cannot move)."""
    dr, dc = MOVES[action]
    to = (player[0] + dr, player[1] + dc)
    if to in level.walls or not _inside(level, to):
        return None
    if to in boxes:
        beyond = (to[0] + dr, to[1] + dc)
        if beyond in level.walls or beyond in boxes or not _inside(level, beyond):
            return None
        boxes = (boxes - {to}) | {beyond}
    return boxes, to


def _inside(level: Level, cell: Cell) -> bool:
    return 0 <= cell[0] < level.height and 0 <= cell[1] < level.width


def solve(level: Level, boxes: frozenset[Cell] | None = None, player: Cell | None = None,
          limit: int = 200_000) -> list[str] | None:
    """A shortest solution (fewest moves) from (boxes, player) — the level's start by default — by breadth-first
    search over (player, boxes); None when there is none within `limit` states."""
    start = (level.boxes if boxes is None else boxes, level.player if player is None else player)
    if start[0] == level.targets:
        return []
    parent: dict = {start: None}
    queue = deque([start])
    while queue and len(parent) < limit:
        state = queue.popleft()
        for action in MOVES:
            nxt = move(level, *state, action)
            if nxt is None or nxt in parent:
                continue
            parent[nxt] = (state, action)
            if nxt[0] == level.targets:
                path = []
                while parent[nxt] is not None:
                    nxt, action = parent[nxt]
                    path.append(action)
                return path[::-1]
            queue.append(nxt)
    return None


def render(level: Level, boxes: frozenset[Cell], player: Cell) -> str:
    """The observation: where the boxes and free targets lie from the player, then the grid, a row a line, cells
    separated by spaces, `_` for floor (module docstring)."""
    current = replace(level, boxes=boxes, player=player)
    grid = "\n".join(" ".join(_xsb(current, (r, c)).replace(" ", "_") for c in range(level.width))
                     for r in range(level.height))
    loose = sorted(boxes - level.targets)
    free = sorted(level.targets - boxes)
    return (f"Boxes: {'; '.join(_offset(player, b) for b in loose) or 'none'}\n"
            f"Targets: {'; '.join(_offset(player, t) for t in free) or 'none'}\n{grid}")


def _offset(origin: Cell, cell: Cell) -> str:
    """Where `cell` lies from `origin` in moves: "2 up 1 left"."""
    dr, dc = cell[0] - origin[0], cell[1] - origin[1]
    parts = [f"{abs(dr)} {'up' if dr < 0 else 'down'}"] if dr else []
    parts += [f"{abs(dc)} {'left' if dc < 0 else 'right'}"] if dc else []
    return " ".join(parts) or "here"


class SokobanEnv:
    """One level as a `TextEnv` (module docstring)."""

    def __init__(self, level: Level, max_steps: int = 30, expert: bool = False, task_id: str = "",
                 task_type: str = ""):
        self.level, self.max_steps, self.expert = level, max_steps, expert
        self.task_id, self.task_type = task_id, task_type or f"boxes-{len(level.boxes)}"
        n = len(level.boxes)
        self.task = f"Push the {n} boxes onto the {n} targets." if n > 1 else "Push the box onto the target."
        self.boxes, self.player, self.turns, self._plan = level.boxes, level.player, 0, []

    def reset(self) -> Turn:
        self.boxes, self.player, self.turns = self.level.boxes, self.level.player, 0
        self._plan = (solve(self.level) or []) if self.expert else []
        return self._turn(render(self.level, self.boxes, self.player), reward=0.0, done=False)

    def step(self, action: str) -> Turn:
        self.turns += 1
        nxt = move(self.level, self.boxes, self.player, action) if action in MOVES else None
        if self.expert:   # stay on the plan, or plan again from wherever the move led
            if self._plan and action == self._plan[0] and nxt is not None:
                self._plan.pop(0)
            elif nxt is not None:
                self._plan = solve(self.level, *nxt) or []
        if nxt is not None:
            self.boxes, self.player = nxt
        won = self.boxes == self.level.targets
        grid = render(self.level, self.boxes, self.player)
        truncated = not won and self.turns >= self.max_steps
        turn = self._turn(grid if nxt is not None else f"{NOTHING}\n{grid}", reward=float(won), done=won or truncated)
        turn.info["admissible_action"] = nxt is not None
        if truncated:
            turn.info["truncated"] = True
        return turn

    def _turn(self, observation: str, reward: float, done: bool) -> Turn:
        admissible = tuple(a for a in MOVES if move(self.level, self.boxes, self.player, a) is not None)
        info = {"expert_action": self._plan[0]} if self.expert and self._plan and not done else {}
        return Turn(self.task, observation, admissible, reward, done, self.boxes == self.level.targets, info)

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------------- generation
def split_of(level: Level) -> str:
    """"eval" or "train": which split a level belongs to, by a hash of its text, so the splits never share one."""
    digest = int(hashlib.sha1(level.text().encode()).hexdigest()[:8], 16)
    return "eval" if digest % _EVAL_BUCKETS == 0 else "train"


def random_level(rng: random.Random, boxes: int, room: int, walls: int) -> Level:
    """A `room`×`room` floor inside walls with `walls` random interior walls (the floor kept connected) and targets,
    boxes and the player on distinct random floor cells. Not checked for a solution (`solve` does that)."""
    interior = [(r, c) for r in range(1, room + 1) for c in range(1, room + 1)]
    while True:
        inner = set(rng.sample(interior, walls))
        floor = [cell for cell in interior if cell not in inner]
        if _connected(floor):
            break
    border = {(r, c) for r in range(room + 2) for c in range(room + 2)} - set(interior)
    cells = rng.sample(floor, 2 * boxes + 1)
    return Level(frozenset(border | inner), frozenset(cells[:boxes]), frozenset(cells[boxes:2 * boxes]), cells[-1],
                 room + 2, room + 2)


def _connected(floor: list[Cell]) -> bool:
    cells, seen, queue = set(floor), {floor[0]}, deque([floor[0]])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES.values():
            nxt = (r + dr, c + dc)
            if nxt in cells and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return len(seen) == len(cells)


def sokoban_tasks(split: str, n: int, seed: int = 0, types: Sequence[str] | None = None, room: int = 5,
                  walls: int = 3, min_moves: int = 4, max_moves: int = 20) -> list[TaskSpec]:
    """`n` solvable levels of `split` ("train" or "eval"), round-robin over `types` (default boxes-1 and boxes-2),
    each solved by breadth-first search in `min_moves`..`max_moves` moves (`walkthrough_len`); seeded and
    deterministic, distinct, and never in the other split (`split_of`)."""
    if split not in ("train", "eval"):
        raise UserError(f"Sokoban split {split!r}: expected train or eval")
    types = tuple(types or DEFAULT_TYPES)
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        raise UserError(f"Sokoban task type {unknown[0]!r}: expected one of {', '.join(TYPES)}")
    rng, seen, tasks = random.Random(f"sokoban/{split}/{seed}"), set(), []
    for i in range(n):
        task_type = types[i % len(types)]
        while True:
            level = random_level(rng, int(task_type.split("-")[1]), room, walls)
            text = level.text()
            if text in seen or split_of(level) != split:
                continue
            plan = solve(level)
            if plan is not None and min_moves <= len(plan) <= max_moves:
                seen.add(text)
                tasks.append(TaskSpec(task_id=f"sokoban-{hashlib.sha1(text.encode()).hexdigest()[:10]}",
                                      task_type=task_type, game=text, split=split, walkthrough_len=len(plan),
                                      seed=seed, env="sokoban"))
                break
    return tasks


def generate_tasks(out_dir: str | Path, split: str, num: int, seed: int, types: Sequence[str] | None = None,
                   workers: int = 1, progress: bool = True, force: bool = False) -> list[TaskSpec]:
    """A task folder of `num` levels (`sokoban_tasks`): its tasks.jsonl, written atomically into `out_dir`. The
    registry's task generator for env "sokoban" (`workers`, `progress`: a thousand levels take seconds)."""
    tasks = sokoban_tasks(split, num, seed, types)
    write_manifest(out_dir, tasks, force)
    return tasks


def make(task: TaskSpec, max_steps: int, expert: bool) -> SokobanEnv:
    return SokobanEnv(parse_level(task.game), max_steps=max_steps, expert=expert, task_id=task.task_id,
                      task_type=task.task_type)
