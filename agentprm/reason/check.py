"""Checkers: the final answer of any problem, and every step of a chain-arithmetic solution.

A solution is text; its *steps* are its non-empty lines, and its final answer is what follows "Answer:" on its
last answer line. Final-answer checkers (`CHECKERS`, `checker(name)`), each `(problem, solution) -> bool`:

    numeric   the answer's last number equals the reference's (within 1e-6 relative); GSM8K-style problems
    exact     the answer text equals the reference, whitespace and case ignored
    <module>:<function>   your own, imported by name (a function of (Problem, str) -> bool)

**Step verdicts** (`step_verdicts`, chain problems only) judge each line against the problem and the lines before
it, the way ProcessBench labels the first wrong step:

    a step line   "<a> <op> <x> [<op> <x> ...] = <v>" is right when <a> is the value the previous line showed (the
                  start number for the first line), its (op, x) pairs are the problem's next instructions in order,
                  all of one precedence class (so left to right and the usual precedence agree), and <v> is their
                  value. Whatever it shows, the next line continues from <v> and from the instructions after the
                  ones it wrote: an arithmetic slip is one wrong step, and the lines after it can be right.
    the answer    "Answer: <v>" is right when every instruction has been written and <v> is the value shown last.
    anything else (a line that does not parse, a line after the answer) is wrong.

`first_error` is the index of the first wrong line, or len(lines) for a solution that never gives an answer, or None
when every line is right — and then, by construction, the answer is the reference.
"""
from __future__ import annotations

import importlib
import inspect
import math
import re
from dataclasses import dataclass
from typing import Callable

from agentprm.errors import UserError
from agentprm.reason.problems import Problem, apply
from agentprm.registry import Registry

ANSWER_PREFIX = "Answer:"
_STEP = re.compile(r"^\s*(-?\d+)((?:\s*[-+*]\s*\d+)+)\s*=\s*(-?\d+)\s*$")
_PAIR = re.compile(r"([-+*])\s*(\d+)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CLASS = {"+": "additive", "-": "additive", "*": "multiplicative"}

Checker = Callable[[Problem, str], bool]
CHECKERS: Registry[Checker] = Registry("answer checker")


def steps(solution: str) -> list[str]:
    return [line.strip() for line in solution.splitlines() if line.strip()]


def final_answer(solution: str) -> str | None:
    """The text after "Answer:" on the last line that starts with it; None without one."""
    found = [line[len(ANSWER_PREFIX):].strip() for line in steps(solution) if line.startswith(ANSWER_PREFIX)]
    return found[-1] if found else None


def _numbers(text: str) -> list[float]:
    return [float(x) for x in _NUMBER.findall(text.replace(",", ""))]


def numeric(problem: Problem, solution: str) -> bool:
    answer, reference = final_answer(solution), _numbers(problem.answer)
    got = _numbers(answer) if answer is not None else []
    return bool(got and reference) and math.isclose(got[-1], reference[-1], rel_tol=1e-6, abs_tol=1e-9)


def exact(problem: Problem, solution: str) -> bool:
    answer = final_answer(solution)
    return answer is not None and " ".join(answer.lower().split()) == " ".join(problem.answer.lower().split())


CHECKERS.add("numeric", numeric)
CHECKERS.add("exact", exact)


def checker(name: str) -> Checker:
    """A registered checker, or `module:function` imported (a one-line error if it cannot be)."""
    if ":" not in name:
        return CHECKERS.entry(name)
    module, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as e:   # ValueError: ":" (an empty module name)
        raise UserError(f"answer checker {name!r} cannot be imported: {e}") from None
    if not callable(fn):
        raise UserError(f"answer checker {name!r} is not a function")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise UserError(f"answer checker {name!r} must take (problem, solution)") from None
    except ValueError:   # a builtin without a signature: judged by what it returns, below
        pass

    def judged(problem: Problem, solution: str) -> bool:
        verdict = fn(problem, solution)
        if not (isinstance(verdict, (bool, int)) and verdict in (0, 1)) and type(verdict).__name__ != "bool_":
            raise UserError(f"answer checker {name!r} returned {verdict!r}, not true/false")
        return bool(verdict)
    return judged


@dataclass(frozen=True)
class Verdict:
    lines: tuple[str, ...]
    right: tuple[bool, ...]     # one per line
    answered: bool              # the solution has an answer line
    correct: bool               # its final answer is the reference

    @property
    def first_error(self) -> int | None:
        wrong = [k for k, ok in enumerate(self.right) if not ok]
        if wrong:
            return wrong[0]
        return None if self.answered else len(self.lines)


def step_verdicts(problem: Problem, solution: str) -> Verdict:
    """Judge every line of a chain-arithmetic solution (module doc); a one-line error for a problem without a chain."""
    if not problem.checkable_steps:
        raise UserError(f"problem {problem.id!r} has no chain: only its final answer can be checked")
    lines = steps(solution)
    value, done, right, answered = problem.start, 0, [], False
    for line in lines:
        if answered:
            right.append(False)
            continue
        if line.startswith(ANSWER_PREFIX):
            answered = True
            got = _numbers(line[len(ANSWER_PREFIX):])
            right.append(done == len(problem.ops) and len(got) == 1 and got[0] == value)
            continue
        match = _STEP.match(line)
        if match is None:
            right.append(False)
            continue
        first, shown = int(match.group(1)), int(match.group(3))
        pairs = [(op, int(x)) for op, x in _PAIR.findall(match.group(2))]
        result = first
        for op, x in pairs:
            result = apply(result, op, x)
        right.append(first == value and tuple(pairs) == problem.ops[done:done + len(pairs)]
                     and len({_CLASS[op] for op, _ in pairs}) == 1 and result == shown)
        value, done = shown, done + len(pairs)
    answer = final_answer(solution)
    correct = answer is not None and _numbers(answer)[-1:] == _numbers(problem.answer)[-1:]
    return Verdict(tuple(lines), tuple(right), answered, correct)
