"""Where things tend to be: ALFWorld's layout prior, and a critic that adds it to another critic's scores.

Why. Of the held-out pairs of π's alternatives at one state that the Monte-Carlo oracle orders, 45% are two
*searching* commands — going to, or opening, a receptacle whose contents the state has not shown — and their order
is the hidden layout's. Every critic trained here ranks those pairs at chance, however much data, capacity or input
it is given (docs/results.md, "what the held-out pairs turn on"); the statistic it misses is one count away:

    P(o in r) = (placed(o, r) + 1/2) / (games with both(o, r) + 1)

— over the train games' PDDL problems, how often an object of type o starts in a receptacle of type r, among the
games that have both (add-half smoothing, so an unseen pair is 1/2 of nothing rather than 0 or 1). A searching
command's *layout advantage* is the logit of its chance of showing what the task still wants, minus the mean
logit over the state's other unexplored receptacles:

    f(s, a) = logit P(w in type(r_a)) − mean_{r unexplored in s} logit P(w in type(r)),   w = the wanted type(s)

(the max over the wanted types: the task's object, or the lamp of a look-at task once the object is in hand), and
f = 0 for every command that does not search. `LayoutCritic` scores logit Q_base(s, a) + weight · f(s, a): the
learned critic decides what the state shows, the prior decides where to look.

The prior reads only what any agent may know: the train split's game files, and the task sentence and the
receptacles the first observation lists. Train and eval splits never share a floor plan (docs/alfworld.md).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch

from agentprm.agent.format import parse_reply
from agentprm.agent.state import object_type
from agentprm.errors import UserError
from agentprm.io import read_text, write_text

if TYPE_CHECKING:
    from agentprm.agent.critic import Critic
    from agentprm.agent.state import AgentState
    from agentprm.envs.base import TaskSpec

_PLACED = re.compile(r"\(inReceptacle ([A-Za-z]+)_bar_\S+ ([A-Za-z]+)_bar_\S+\)")
_RECEPTACLE = re.compile(r"^\s+([A-Za-z]+)_bar_\S+ - receptacle$", re.M)
_SEARCH_VERBS = ("go to ", "open ")
_CLIP = 1e-6   # a critic's probability is clipped this far from 0 and 1 before its logit


def visited(command: str) -> str | None:
    """The receptacle a "go to" or "open" command names; None for any other command."""
    for verb in _SEARCH_VERBS:
        if command.startswith(verb):
            return command[len(verb):]
    return None


def searches(state: AgentState, command: str) -> bool:
    """A command whose outcome turns on what the agent has not seen: going to, or opening, a receptacle whose
    contents it does not know (never visited, or seen closed)."""
    target = visited(command)
    return target is not None and state.contents(target) is None


def wanted(state: AgentState) -> set[str]:
    """The object types a search could still be for: the task's object (unless it is in hand) and its lamp."""
    goal = state.goal
    if goal is None:
        return set()
    types = {goal.obj, goal.toggle} - {""}
    if state.holding and object_type(state.holding).removesuffix("sliced") == goal.obj:
        types.discard(goal.obj)
    return types


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class LayoutPrior:
    """Counts of (object type, receptacle type): `placed` — games where such an object starts in such a receptacle;
    `both` — games that have both. Types are lower-cased as the game's text names them ("SinkBasin" -> "sinkbasin")."""
    placed: dict[tuple[str, str], int] = field(default_factory=dict)
    both: dict[tuple[str, str], int] = field(default_factory=dict)
    games: int = 0

    @classmethod
    def from_tasks(cls, tasks: Sequence[TaskSpec]) -> LayoutPrior:
        """Counted from the PDDL problems (`game.tw-pddl`) of ALFWorld tasks — the train split's, never the eval's."""
        return cls.from_games([Path(t.game) for t in tasks])

    @classmethod
    def from_games(cls, folders: Sequence[Path]) -> LayoutPrior:
        """Counted from the PDDL problems of ALFWorld game folders (each with its `game.tw-pddl`)."""
        placed, both = Counter(), Counter()
        for folder in folders:
            path = Path(folder) / "game.tw-pddl"
            try:
                problem = json.loads(path.read_text())["pddl_problem"]
            except (OSError, ValueError, KeyError) as e:
                raise UserError(f"{path}: not an ALFWorld game file with a pddl_problem ({e})") from None
            pairs = {(o.lower(), r.lower()) for o, r in _PLACED.findall(problem)}
            receptacles = {r.lower() for r in _RECEPTACLE.findall(problem)}
            placed.update(pairs)
            both.update((o, r) for o in {o for o, _ in pairs} for r in receptacles)
        return cls(dict(placed), dict(both), len(folders))

    def chance(self, obj: str, receptacle: str) -> float:
        """P(an object of type `obj` starts in a receptacle of type `receptacle`), add-half smoothed."""
        key = (obj, receptacle)
        return (self.placed.get(key, 0) + 0.5) / (self.both.get(key, 0) + 1.0)

    def advantage(self, state: AgentState, command: str) -> float:
        """f(s, a) of the module docstring: a searching command's logit chance of showing what the task still wants,
        minus the mean over the state's unexplored receptacles; 0 for a command that does not search."""
        types = wanted(state)
        if not types or not searches(state, command):
            return 0.0

        def best(receptacle: str) -> float:
            return max(_logit(self.chance(w, object_type(receptacle))) for w in types)

        unexplored = [r for r in state.room if state.contents(r) is None] or [visited(command)]
        return best(visited(command)) - sum(map(best, unexplored)) / len(unexplored)

    def save(self, path: str | Path) -> None:
        rows = lambda counts: sorted([o, r, n] for (o, r), n in counts.items())  # noqa: E731
        write_text(Path(path), json.dumps({"kind": "alfworld-layout-prior", "games": self.games,
                                           "placed": rows(self.placed), "both": rows(self.both)}) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> LayoutPrior:
        path = Path(path)
        try:
            data = json.loads(read_text(path, max_bytes=64 << 20))   # a FIFO or /dev/zero: refused, not read
            if not isinstance(data, dict):
                raise ValueError(f"a JSON object is needed, got {type(data).__name__}")
            if data.get("kind") != "alfworld-layout-prior":
                raise ValueError(f"kind is {data.get('kind')!r}, not 'alfworld-layout-prior'")
            counts = [{(o, r): int(n) for o, r, n in data[k]} for k in ("placed", "both")]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise UserError(f"{path}: not a layout prior ({str(e)[:200]})") from None
        return cls(*counts, int(data.get("games", 0)))


class LayoutCritic:
    """A critic plus the layout prior: score = logit Q_base(s, a) + weight · f(s, a) (the module docstring). With no
    base critic, the base is 0: the prior alone, which leaves every non-searching command tied. Its scores are on
    a logit scale, not probabilities: meant for ranking one state's replies (Best-of-N, the policy updates)."""

    def __init__(self, base: Critic | None, prior: LayoutPrior, weight: float):
        self.base, self.prior, self.weight = base, prior, weight
        self.name = f"{getattr(base, 'name', 'prm') if base is not None else 'none'}+layout{weight:g}"

    def score(self, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor:
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        base = torch.zeros(len(replies), dtype=torch.float64)
        if self.base is not None and len(replies):
            if hasattr(self.base, "logits"):     # the PRMs: their logits, unsquashed
                base = self.base.logits(states, replies).double()
            else:
                q = self.base.score(states, replies).double().clamp(_CLIP, 1 - _CLIP)
                base = torch.log(q / (1 - q))
        f = torch.tensor([self.prior.advantage(s, parse_reply(r)[1]) for s, r in zip(states, replies)],
                         dtype=torch.float64)
        return (base + self.weight * f).float()
