"""`AgentState`: what an ALFWorld agent knows at a turn, folded incrementally from `Turn`s.

    state = AgentState.start(env.reset(), task_id=env.task_id)
    state = state.advance(action, env.step(action))      # a new state; the old one is unchanged

ALFWorld observations are generated from a fixed grammar (alfworld/data/alfred.twl2), so the agent's memory is
parsed from them with a handful of regexes: the room's receptacles (from the first observation, kept for the
whole episode: a `look` later replaces that listing with "you see nothing"), what each visited receptacle held,
where the agent stands, and what it carries. Prompts render this memory (see `agentprm.agent.format`) instead
of a long raw history, which small models cannot use.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from functools import cache
from typing import NamedTuple

from agentprm.envs.alfworld.setup import TASK_TYPES, import_alfworld
from agentprm.envs.base import Turn

RECENT_TURNS = 9  # (action, observation) pairs kept: the current one and up to 8 before it

Contents = tuple[str, ...] | None  # None: seen closed, inside unknown

_NAME = r"\b[a-z]+ \d+\b"  # display names are "<lowercased ALFRED type> <instance number>"
_ROOM_RE = re.compile(r"Looking quickly around you, you see (.+?)\.(?:\n|$)")
_ARRIVE_RE = re.compile(rf"You arrive at ({_NAME})\.")
_FACING_RE = re.compile(rf"You are facing the ({_NAME})\.")
_MIDDLE = "You are in the middle of a room."
_SEE_RE = re.compile(rf"(?:On the ({_NAME}), you see|The ({_NAME}) is open\. In it, you see) (.+?)\.")
_CLOSED_RE = re.compile(rf"The ({_NAME}) is closed\.")
_PICK_RE = re.compile(rf"You pick up the ({_NAME})(?: from the ({_NAME}))?\.")
_PUT_RE = re.compile(rf"You (?:move|put) the ({_NAME}) (?:to|in) the ({_NAME})\.")
_TREAT_RE = re.compile(rf"You (heat|cool|clean) the ({_NAME}) using the")
_CARRY_RE = re.compile(r"You are carrying: (.+?)\.")
_CARRY_NOTHING = "You are not carrying anything."
_TREATED = {"heat": "hot", "cool": "cool", "clean": "clean"}


class Goal(NamedTuple):
    """The type words of a templated ALFWorld task sentence ("" where the template has no such slot)."""
    obj: str
    recep: str
    toggle: str


def parse_items(listing: str) -> tuple[str, ...]:
    """Names in an env listing: 'a creditcard 3, and a peppershaker 1' -> ('creditcard 3', 'peppershaker 1')."""
    return tuple(re.findall(_NAME, listing))


def object_type(name: str) -> str:
    return name.rsplit(" ", 1)[0]


@cache
def _goal_patterns() -> tuple[re.Pattern, ...]:
    """One regex per goal template of our task types (and their sliced variants), slots as named groups."""
    import_alfworld()
    from alfworld.gen.goal_library import gdict

    patterns = []
    for task_type in TASK_TYPES:
        for template in gdict[task_type]["templates"] + gdict[f"{task_type}_slice"]["templates"]:
            parts = re.split(r"\{(\w+)\}", template)  # literal, slot, literal, slot, ...
            regex = "".join(re.escape(p) if i % 2 == 0 else rf"(?P<{p}>\w+)" for i, p in enumerate(parts))
            patterns.append(re.compile(regex))
    return tuple(patterns)


@cache
def parse_goal(task: str) -> Goal | None:
    """The object/receptacle/toggle words of a templated task sentence; None for free text (human annotations)."""
    sentence = task.strip().rstrip(".")
    for pattern in _goal_patterns():
        m = pattern.fullmatch(sentence)
        if m:
            slots = m.groupdict()
            return Goal(slots.get("obj", ""), slots.get("recep", ""), slots.get("toggle", ""))
    return None


def _chain(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass(frozen=True)
class AgentState:
    task: str
    task_id: str
    room: tuple[str, ...]                       # receptacles listed by the first observation, in listing order
    memory: tuple[tuple[str, Contents], ...]    # visited receptacle -> last seen contents, in first-visit order
    location: str | None                        # receptacle the agent stands at; None in the middle of the room
    holding: str | None
    held_state: tuple[str, ...]                 # "hot" / "cool" / "clean", in the order applied
    recent: tuple[tuple[str, str], ...]         # last RECENT_TURNS (action, observation); the last is the current one
    observation: str                            # current observation, raw
    admissible: tuple[str, ...]
    steps: int
    _key: str = field(repr=False)
    # every command sent so far, in order: what replays the env to this state (the oracle critic, rollout/oracle.py);
    # the key already encodes the history, so it is left out of equality and of the prompt
    commands: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # the observation after reset, which `recent` drops after the first step (ALFWorld's is summarised in `room`;
    # the plain prompt format shows it as "Start:"); in the key already, so not compared either
    first_observation: str = field(default="", repr=False, compare=False)

    @classmethod
    def start(cls, turn: Turn, task_id: str = "") -> AgentState:
        m = _ROOM_RE.search(turn.observation)
        return cls(task=turn.task, task_id=task_id, room=parse_items(m.group(1)) if m else (), memory=(),
                   location=None, holding=None, held_state=(), recent=(), observation=turn.observation,
                   admissible=turn.admissible, steps=0, _key=_chain(task_id, turn.task, turn.observation),
                   first_observation=turn.observation)

    def advance(self, action: str, turn: Turn) -> AgentState:
        obs = turn.observation
        state = replace(self, observation=obs, admissible=turn.admissible, steps=self.steps + 1,
                        recent=(*self.recent, (action, obs))[-RECENT_TURNS:], _key=_chain(self._key, action, obs),
                        commands=(*self.commands, action))
        return state._observe(obs)

    def key(self) -> str:
        """sha256 of (task_id, task, first observation, then every action and observation): equal exactly when the
        histories are. The Q-target of (state, action) is keyed by (state.key(), action)."""
        return self._key

    def contents(self, receptacle: str) -> Contents:
        return dict(self.memory).get(receptacle)

    @property
    def goal(self) -> Goal | None:
        return parse_goal(self.task)

    def sightings(self) -> tuple[tuple[str, str], ...]:
        """(object, receptacle) for every remembered object of the task's object or lamp type, not held."""
        goal = self.goal
        if goal is None:
            return ()
        wanted = {goal.obj, goal.obj + "sliced", goal.toggle} - {"", "sliced"}
        return tuple((o, r) for r, items in self.memory for o in items or () if object_type(o) in wanted)

    def _observe(self, obs: str) -> AgentState:
        """Fold the facts an observation states into memory; text that matches nothing changes nothing."""
        s = self
        if obs.startswith(_MIDDLE):
            s = replace(s, location=None)
        if m := _ARRIVE_RE.search(obs) or _FACING_RE.search(obs):
            s = replace(s, location=m.group(1))
        if m := _CLOSED_RE.search(obs):
            if m.group(1) not in dict(s.memory):
                s = s._remember(m.group(1), None)
        if m := _SEE_RE.search(obs):
            s = s._remember(m.group(1) or m.group(2), parse_items(m.group(3)))
        if m := _PICK_RE.search(obs):
            obj, source = m.group(1), m.group(2) or s.location
            known = s.contents(source) if source else None
            s = replace(s, holding=obj, held_state=())
            if known is not None:
                s = s._remember(source, tuple(o for o in known if o != obj))
        if m := _PUT_RE.search(obs):
            obj, target = m.groups()
            s = replace(s, holding=None, held_state=())._remember(target, (*(s.contents(target) or ()), obj))
        if m := _TREAT_RE.search(obs):
            adjective = _TREATED[m.group(1)]
            if s.holding == m.group(2) and adjective not in s.held_state:
                s = replace(s, held_state=(*s.held_state, adjective))
        if m := _CARRY_RE.search(obs):
            items = parse_items(m.group(1))
            if items and items[0] != s.holding:
                s = replace(s, holding=items[0], held_state=())
        if obs.startswith(_CARRY_NOTHING):
            s = replace(s, holding=None, held_state=())
        return s

    def _remember(self, receptacle: str, contents: Contents) -> AgentState:
        if self.room and receptacle not in self.room:  # e.g. "put the apple 1 in the mug 1": a mug is no place
            return self
        known = dict(self.memory)
        known[receptacle] = contents  # dicts keep first-insertion order: visit order survives updates
        return replace(self, memory=tuple(known.items()))
