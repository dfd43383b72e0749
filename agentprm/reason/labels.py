"""Monte-Carlo step labels (Math-Shepherd, arXiv 2312.08935): how likely a solution's prefix still ends right.

For the prefix that ends at step k (lines 0..k of the solution), the policy writes K completions; each whole text
(prefix + completion) is checked for its final answer. Then

    soft_k = (1/K) Σ_j 1[completion j ends right]     (Math-Shepherd's soft estimate, a Monte-Carlo Q of the prefix)
    hard_k = 1[soft_k > 0]                             (its hard estimate: some completion still gets there)

The last step is the answer line: nothing is left to complete, so its labels are the solution's own outcome. These
are the agent loop's Q̂ with the reasoning step as the action and the K completions as its rollouts
(targets/mc.py), without a discount: a reasoning episode's only reward is its answer. They need a final-answer
checker only, so a user's problems (GSM8K-style JSONL) get step labels as generated ones do.

Labelled solutions (`agentprm reason label`) are a Parquet file, one row per solution, read back against the problems
file they were made from:

    column    type            meaning
    id        string          the problem's id (in the problems file)
    solution  string          the policy's sampled solution
    soft      list<float64>   soft_k for each of its steps (non-empty lines), in [0, 1]
    outcome   float64         1 if its final answer is right, else 0

hard_k = 1[soft_k > 0] is derived on reading. Metadata `agentprm`: kind "step-labels", K, the policy and the problems.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

import pyarrow as pa

from agentprm.data.tables import read_checked, write_with_info
from agentprm.errors import UserError
from agentprm.reason.check import steps
from agentprm.reason.problems import Problem

STEP_LABELS_SCHEMA = pa.schema([("id", pa.string()), ("solution", pa.string()), ("soft", pa.list_(pa.float64())),
                                ("outcome", pa.float64())])


class Completer(Protocol):
    def complete(self, problems: Sequence[Problem], prefixes: Sequence[str], n: int, seed: int) -> list[list[str]]:
        """`n` continuations of each (problem, prefix): the rest of the solution after `prefix`, as text."""
        ...


@dataclass(frozen=True)
class StepLabels:
    soft: tuple[float, ...]   # one per step (line) of the solution
    hard: tuple[int, ...]


@dataclass(frozen=True)
class StepExample:
    """A labelled solution: what a step PRM trains on."""
    problem: Problem
    lines: tuple[str, ...]
    soft: tuple[float, ...]
    hard: tuple[int, ...]
    outcome: float


def prefix(solution: str, k: int) -> str:
    """Lines 0..k of the solution, each closed by a newline: the text a completion continues."""
    return "".join(line + "\n" for line in steps(solution)[:k + 1])


def mc_step_labels(problems: Sequence[Problem], solutions: Sequence[str], completer: Completer, k: int,
                   check: Callable[[Problem, str], bool], seed: int = 0) -> list[StepLabels]:
    """Labels of every step of every solution, all prefixes completed in one `completer` call."""
    if len(problems) != len(solutions):
        raise ValueError(f"{len(problems)} problems for {len(solutions)} solutions")
    asks: list[tuple[int, int]] = []    # (solution, step) of each prefix to complete
    for i, solution in enumerate(solutions):
        asks += [(i, s) for s in range(len(steps(solution)) - 1)]
    texts = [prefix(solutions[i], s) for i, s in asks]
    completions = completer.complete([problems[i] for i, _ in asks], texts, k, seed) if asks else []
    soft: list[list[float]] = [[] for _ in solutions]
    for (i, _), text, outs in zip(asks, texts, completions):
        soft[i].append(sum(check(problems[i], text + out) for out in outs) / len(outs))
    labels = []
    for i, (problem, solution) in enumerate(zip(problems, solutions)):
        values = soft[i] + [float(check(problem, solution))] if steps(solution) else []
        labels.append(StepLabels(tuple(values), tuple(int(v > 0) for v in values)))
    return labels


def label_solutions(problems: Sequence[Problem], solutions: Sequence[str], completer: Completer, k: int,
                    check: Callable[[Problem, str], bool], seed: int = 0) -> list[StepExample]:
    """`mc_step_labels` as training examples; solutions without a line are left out."""
    labels = mc_step_labels(problems, solutions, completer, k, check, seed)
    return [StepExample(p, tuple(steps(s)), lab.soft, lab.hard, float(check(p, s)))
            for p, s, lab in zip(problems, solutions, labels) if steps(s)]


def write_step_labels(path: str | Path, examples: Sequence[StepExample], info: dict) -> Path:
    table = pa.table({"id": [e.problem.id for e in examples], "solution": ["\n".join(e.lines) for e in examples],
                      "soft": [list(e.soft) for e in examples], "outcome": [e.outcome for e in examples]},
                     schema=STEP_LABELS_SCHEMA)
    return write_with_info(path, table, {"kind": "step-labels", **info})


def read_step_labels(path: str | Path, problems: Sequence[Problem]) -> list[StepExample]:
    """Labelled solutions of `problems` (by id); a one-line error naming the file, row and field on bad input."""
    rows = read_checked(path, STEP_LABELS_SCHEMA, "step labels").table.to_pylist()
    by_id = {p.id: p for p in problems}
    examples = []
    for k, row in enumerate(rows):
        where = f"{path}: row {k}"
        if row["id"] not in by_id:
            raise UserError(f"{where}: field 'id' {row['id']!r} is no problem of the problems file")
        lines, soft = tuple(steps(row["solution"])), tuple(row["soft"])
        if len(soft) != len(lines) or not lines:
            raise UserError(f"{where}: field 'soft' has {len(soft)} labels for a solution of {len(lines)} steps")
        if any(v is None or not 0.0 <= v <= 1.0 for v in soft) or row["outcome"] not in (0.0, 1.0):
            raise UserError(f"{where}: fields 'soft' and 'outcome' must hold values in [0, 1] (outcome 0 or 1)")
        examples.append(StepExample(by_id[row["id"]], lines, soft, tuple(int(v > 0) for v in soft), row["outcome"]))
    return examples
