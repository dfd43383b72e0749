"""Reasoning problems: a generated family whose every step can be checked, and a user's JSONL of problems.

**Chain arithmetic** (`chain_problems`): a start number and a list of instructions, applied in order,

    Start with 37. Add 58. Subtract 21. Multiply by 3. What is the result?

A worked solution writes one line per step, `<previous result> <op> <number> [<op> <number> ...] = <value>`, then
`Answer: <value>` (solutions.py writes them, check.py judges each line). A step may carry several instructions of one
precedence class ("37 + 58 - 21 = 74"), so how many partial results a solution shows — its length — is the model's
choice. Knobs: `steps` (instructions per problem, a min..max range), `digits` (of the start and of added or
subtracted numbers), `ops` (any of "+-*"; a multiplier is one digit, 2..9). Values stay positive (a subtrahend is below
the current value). Train and eval never share a problem: a question belongs to one split by a hash of its
text (1 in 5 to eval), as Sokoban's levels do.

**A user's problems**: JSONL, one object a line with "question" (text) and "answer" (text or number), optionally
"id"; the final answer is then all a checker can judge (check.py: "exact", "numeric", or your own function).
Generated problems are written in the same format plus a "chain" object {"start", "ops"} that makes their steps
checkable.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from agentprm.errors import require
from agentprm.io import parse_json, read_text, write_text
from agentprm.reason.config import ChainConfig

OPS = "+-*"
OP_WORDS = {"+": "Add {}.", "-": "Subtract {}.", "*": "Multiply by {}."}
SPLITS = ("train", "eval")
DEFAULTS = ChainConfig()
_EVAL_BUCKETS = 5   # a question is eval's when the hash of its text is 0 modulo this, train's otherwise


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: str
    start: int | None = None                  # chain arithmetic only: the start number ...
    ops: tuple[tuple[str, int], ...] = ()     # ... and the instructions, in order

    @property
    def checkable_steps(self) -> bool:
        return self.start is not None


def apply(value: int, op: str, operand: int) -> int:
    return value + operand if op == "+" else value - operand if op == "-" else value * operand


def chain_question(start: int, ops: Sequence[tuple[str, int]]) -> str:
    return " ".join([f"Start with {start}.", *(OP_WORDS[op].format(x) for op, x in ops), "What is the result?"])


def chain_problem(start: int, ops: Sequence[tuple[str, int]], id: str | None = None) -> Problem:
    value = start
    for op, x in ops:
        value = apply(value, op, x)
    question = chain_question(start, ops)
    return Problem(id or _digest(question), question, str(value), start, tuple(ops))


def split_of(question: str) -> str:
    """"eval" or "train": which split a question belongs to, by a hash of its text, so the splits never share one."""
    return "eval" if int(_digest(question)[:8], 16) % _EVAL_BUCKETS == 0 else "train"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def chain_problems(split: str, n: int, seed: int = 0, steps: tuple[int, int] = (DEFAULTS.min_steps, DEFAULTS.max_steps),
                   digits: int = DEFAULTS.digits, ops: str = DEFAULTS.ops) -> list[Problem]:
    """`n` distinct problems of `split`, the same for the same arguments (defaults: `ChainConfig`'s)."""
    require(split in SPLITS, f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    require(1 <= steps[0] <= steps[1], f"steps must be a range min..max with 1 <= min <= max, not {steps}")
    require(1 <= digits <= 6, f"digits must be 1..6, not {digits}")
    require(bool(ops) and set(ops) <= set(OPS), f"ops must be some of {OPS!r}, not {ops!r}")
    rng = random.Random(f"chain:{seed}:{split}")
    low, high = 10 ** (digits - 1), 10 ** digits - 1
    found: dict[str, Problem] = {}
    for _ in range(200 * n + 1000):
        if len(found) == n:
            break
        start = value = rng.randint(low, high)
        chain = []
        for _ in range(rng.randint(*steps)):
            op = rng.choice(ops)
            if op == "-" and value < 2:
                op = rng.choice(ops.replace("-", "") or "+")
            x = rng.randint(2, 9) if op == "*" else rng.randint(min(low, value - 1), min(high, value - 1)) \
                if op == "-" else rng.randint(low, high)
            chain.append((op, x))
            value = apply(value, op, x)
        problem = chain_problem(start, chain)
        if split_of(problem.question) == split:
            found.setdefault(problem.id, problem)
    require(len(found) == n, f"found only {len(found)} distinct {split} problems of {n} asked for: widen the knobs")
    return list(found.values())


def write_problems(path: str | Path, problems: Sequence[Problem]) -> None:
    rows = []
    for p in problems:
        row = {"id": p.id, "question": p.question, "answer": p.answer}
        if p.checkable_steps:
            row["chain"] = {"start": p.start, "ops": [[op, x] for op, x in p.ops]}
        rows.append(json.dumps(row))
    write_text(path, "".join(r + "\n" for r in rows))


def read_problems(path: str | Path) -> list[Problem]:
    """A problems JSONL (see the module doc); a one-line error naming the file, line and field on bad input."""
    problems, seen = [], set()
    for k, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{k}"
        row = parse_json(line, where)
        require(isinstance(row, dict), f"{where}: a line must be a JSON object")
        question, answer = row.get("question"), row.get("answer")
        require(isinstance(question, str) and question.strip() != "", f"{where}: field 'question' must be non-empty text")
        require(isinstance(answer, (str, int, float)) and not isinstance(answer, bool) and str(answer).strip() != "",
                f"{where}: field 'answer' must be text or a number")
        pid = str(row.get("id", f"line-{k}"))
        require(pid not in seen, f"{where}: field 'id' {pid!r} repeats an earlier line's")
        seen.add(pid)
        chain = row.get("chain")
        if chain is None:
            problems.append(Problem(pid, question, str(answer).strip()))
            continue
        problems.append(_chain_from_row(chain, pid, question, str(answer).strip(), where))
    require(bool(problems), f"{path}: no problems in the file")
    return problems


def _chain_from_row(chain, pid: str, question: str, answer: str, where: str) -> Problem:
    ok = (isinstance(chain, dict) and isinstance(chain.get("start"), int) and isinstance(chain.get("ops"), list)
          and all(isinstance(o, list) and len(o) == 2 and o[0] in OPS and isinstance(o[1], int) for o in chain["ops"]))
    require(ok, f"{where}: field 'chain' must be {{\"start\": int, \"ops\": [[\"+\"|\"-\"|\"*\", int], ...]}}")
    problem = chain_problem(chain["start"], [tuple(o) for o in chain["ops"]], pid)
    require(problem.answer == answer, f"{where}: field 'answer' {answer!r} is not what the chain gives ({problem.answer})")
    return Problem(pid, question, answer, problem.start, problem.ops)
