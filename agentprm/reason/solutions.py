"""Worked solutions of chain-arithmetic problems, the data a tiny model learns to reason from.

    37 + 58 = 95
    95 - 21 = 74
    74 * 3 = 222
    Answer: 222

`write_solution` writes one: each line carries one instruction, or — with probability `merge` per instruction —
also the next ones of the same precedence class ("37 + 58 - 21 = 74"), so solutions of one problem differ in length.
With `error`, one step line (drawn uniformly) carries one mistake of a known kind and the lines after it continue
correctly from what it showed, as a person's worked solution would:

    slip      the line's value is off by 1..9 (right instructions, wrong arithmetic)
    operand   one of the line's numbers is off by 1..9, and the value follows from it (right arithmetic, misread
              instruction)
    skip      the line is left out (an instruction never applied); the line after it is then the wrong one

It returns the text and the index of the line check.py's `step_verdicts` will call the first error (None when
correct): tests hold the two to each other on many random problems. `solution_mix` draws a training mix.
"""
from __future__ import annotations

import random
from typing import Sequence

from agentprm.reason.check import ANSWER_PREFIX
from agentprm.reason.problems import Problem, apply

ERRORS = ("slip", "operand", "skip")
_CLASS = {"+": 0, "-": 0, "*": 1}


def _groups(ops: Sequence[tuple[str, int]], merge: float, rng: random.Random) -> list[list[tuple[str, int]]]:
    groups: list[list[tuple[str, int]]] = []
    for op in ops:
        if groups and _CLASS[op[0]] == _CLASS[groups[-1][-1][0]] and rng.random() < merge:
            groups[-1].append(op)
        else:
            groups.append([op])
    return groups


def _off(rng: random.Random, x: int, floor: int) -> int:
    """x moved by 1..9 either way, never below `floor`."""
    while True:
        y = x + rng.choice([-1, 1]) * rng.randint(1, 9)
        if y >= floor and y != x:
            return y


def _skipped_unseen(groups: list[list[tuple[str, int]]], k: int) -> bool:
    after = [op for g in groups[k + 1:] for op in g]
    return after[:len(groups[k + 1])] == [op for g in groups[k:] for op in g][:len(groups[k + 1])]


def write_solution(problem: Problem, rng: random.Random, merge: float = 0.0,
                   error: str | None = None) -> tuple[str, int | None]:
    """(solution text, index of its first wrong line or None); see the module doc."""
    if error is not None and error not in ERRORS:
        raise ValueError(f"error kind must be one of {ERRORS}, not {error!r}")
    groups = _groups(problem.ops, merge, rng)
    bad = rng.randrange(len(groups)) if error else None
    if error == "skip" and bad + 1 < len(groups) and _skipped_unseen(groups, bad):
        error = "slip"   # the next line would read as the skipped one: the mistake would not show where it was made
    lines, value, first_error = [], problem.start, None
    for k, group in enumerate(groups):
        if k == bad and error == "skip":
            first_error = len(lines)    # the next line (or the answer) is where the missing instruction shows
            continue
        if k == bad and error == "operand":
            j = rng.randrange(len(group))
            group = [(op, _off(rng, x, 2 if op == "*" else 1)) if i == j else (op, x) for i, (op, x) in enumerate(group)]
        shown = value
        for op, x in group:
            shown = apply(shown, op, x)
        if k == bad and error == "slip":
            shown = _off(rng, shown, 0)
        if k == bad and error in ("slip", "operand"):
            first_error = len(lines)
        lines.append(" ".join([str(value), *(f"{op} {x}" for op, x in group), "=", str(shown)]))
        value = shown
    lines.append(f"{ANSWER_PREFIX} {value}")
    return "\n".join(lines), first_error


def solution_mix(problems: Sequence[Problem], seed: int, per_problem: int = 1, merge: float = 0.3,
                 noisy: float = 0.3) -> list[tuple[Problem, str]]:
    """`per_problem` solutions of each problem; a fraction `noisy` of them with one error of a random kind."""
    rng = random.Random(f"solutions:{seed}")
    return [(p, write_solution(p, rng, merge, rng.choice(ERRORS) if rng.random() < noisy else None)[0])
            for p in problems for _ in range(per_problem)]
