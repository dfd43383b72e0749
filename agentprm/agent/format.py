"""The prompt and reply format that the policy and the PRM share: the one place that decides what a model sees.

A prompt is a system message and one user message rendering an `AgentState`, most decision-relevant first:

    Task: put some peppershaker on cabinet.
    Holding: nothing
    Found: peppershaker 1 at drawer 1 (here)
    Room: toaster 1, stoveburner 1, ..., drawer 1 (creditcard 3, peppershaker 1), countertop 1 (nothing), ...
    Location: drawer 1
    Before: go to drawer 1 -> You arrive at drawer 1. The drawer 1 is closed.
    Now: open drawer 1 -> You open the drawer 1. The drawer 1 is open. In it, you see a creditcard 3, ...
    Actions: close drawer 1 | go to cabinet 1 | ...                     (only with show_admissible=True)

"Found" lists where objects of the task's object (and lamp) type were seen, so a small model can copy the
name instead of searching the room listing for it; "(here)" marks the ones at the agent's location, where they can
be taken. "Room" lists every receptacle in the room in search order: the first observation's listing read
backwards (instance numbers ascending, as ALFWorld's expert searches; renumbering augmentation keeps this
consistent because it renames the listing too), so the next place to look is the first bare name that fits the
object. A visited receptacle carries what was last seen in it ("closed" when seen closed and not opened). The
welcome text of the first observation repeats the task and the listing, so "Now" shows only its first sentence. Length with the default history, measured on a
29-receptacle kitchen holding 50 objects: ~140 tokens at the start, ~430 once every receptacle was visited;
show_admissible adds ~5 tokens per admissible action.

A reply is the plain action, or the paper's "REASON: ...\nACTION: ..." form.
"""
from __future__ import annotations

import re

from agentprm.agent.state import AgentState

SYSTEM_PROMPT = "You are a household robot. Reply with the next action."
DEFAULT_HISTORY_TURNS = 2
REASON_MARK, ACTION_MARK = "REASON:", "ACTION:"
_START_OBSERVATION = "You are in the middle of a room."
_ACTION_RE = re.compile(r"ACTION\s*:", re.I)
_REASON_RE = re.compile(r"^\s*REASON\s*:", re.I)

# Every fixed string this module writes: the tokenizer's vocabulary includes their words.
TEMPLATE_TEXT = (SYSTEM_PROMPT, _START_OBSERVATION, REASON_MARK, ACTION_MARK,
                 "Task: Holding: Found: Room: Location: Before: Now: Actions: -> | , ( ) at nothing none here",
                 "hot cool clean closed")


FORMATS = ("alfworld", "plain", "turns")   # PromptConfig.format: what the user message holds besides the task and turns


def state_to_messages(state: AgentState, *, show_admissible: bool = False, history_turns: int = DEFAULT_HISTORY_TURNS,
                      fmt: str = "alfworld", system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """System + user chat messages for `state`. `history_turns` earlier (action, observation) turns are shown
    besides the current one (at most RECENT_TURNS - 1 are kept). `fmt` "alfworld" adds the memory parsed from
    ALFWorld's text (Holding, Found, Room, Location); "plain" shows the task, the first observation ("Start:", once
    the episode has moved on) and the turns, for an environment whose text the ALFWorld parser does not read
    (ScienceWorld, your own); "turns" the task and the turns alone, for one whose observation shows its whole
    state (Sokoban's grid)."""
    if fmt not in FORMATS:
        raise ValueError(f"prompt format {fmt!r}: expected one of {', '.join(FORMATS)}")
    # ALFWorld's welcome text repeats the task and the room, both shown above it; plain shows what the env said
    start = _START_OBSERVATION if state.room and fmt == "alfworld" else state.observation
    *earlier, current = state.recent or [("", start)]
    if fmt == "alfworld":
        held = f"{state.holding} ({', '.join(state.held_state)})" if state.held_state else state.holding
        found = ", ".join(f"{o} at {r} (here)" if r == state.location else f"{o} at {r}" for o, r in state.sightings())
        memory = [f"Holding: {held or 'nothing'}", f"Found: {found or 'nothing'}", f"Room: {_room(state)}",
                  f"Location: {state.location or 'none'}"]
    else:   # plain: where the episode began, once it has moved on; turns: nothing
        memory = [f"Start: {state.first_observation}"] if state.recent and fmt == "plain" else []
    lines = [
        f"Task: {state.task}",
        *memory,
        *(f"Before: {_turn(a, o)}" for a, o in (earlier[-history_turns:] if history_turns > 0 else [])),
        f"Now: {_turn(*current)}",
    ]
    if show_admissible:
        lines.append(f"Actions: {' | '.join(state.admissible)}")
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": "\n".join(lines)}]


def steered_messages(state: AgentState, *, history_turns: int = DEFAULT_HISTORY_TURNS, fmt: str = "alfworld",
                     system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Steered-exploration variant of the prompt (arXiv 2502.10325 §5): "Actions:" lists only the admissible
    commands not tried in the remembered history (all of them when every one was tried), nudging the policy
    towards actions it has not taken. It says so with the template's own field, not a new instruction sentence:
    the word-level tokenizer's vocabulary is fixed by TEMPLATE_TEXT, and new words would change every model's ids."""
    tried = {action for action, _ in state.recent}
    untried = [a for a in state.admissible if a not in tried] or list(state.admissible)
    system, user = state_to_messages(state, history_turns=history_turns, fmt=fmt, system_prompt=system_prompt)
    return [system, {**user, "content": f"{user['content']}\nActions: {' | '.join(untried)}"}]


def format_reply(action: str, reason: str | None = None) -> str:
    return f"{REASON_MARK} {reason}\n{ACTION_MARK} {action}" if reason else action


def parse_reply(text: str) -> tuple[str | None, str]:
    """(reason, action) from "REASON: ... ACTION: ..." (markers in any case, the last ACTION marker wins) or from
    a plain action. The action is its first line, whitespace-normalised, without a trailing period."""
    marks = list(_ACTION_RE.finditer(text))
    reason = None
    if marks:
        head, text = text[:marks[-1].start()], text[marks[-1].end():]
        reason = _REASON_RE.sub("", head).strip() or None
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    return reason, " ".join(first_line.split()).removesuffix(".")


def _turn(action: str, observation: str) -> str:
    return f"{action} -> {observation}" if action else observation


def _room(state: AgentState) -> str:
    known = dict(state.memory)
    names = [*reversed(state.room), *(n for n in known if n not in state.room)]
    return ", ".join(f"{n} ({_contents(known[n])})" if n in known else n for n in names)


def _contents(items: tuple[str, ...] | None) -> str:
    if items is None:
        return "closed"
    return ", ".join(items) or "nothing"
