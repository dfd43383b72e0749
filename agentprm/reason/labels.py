"""Monte-Carlo step labels (Math-Shepherd, arXiv 2312.08935): how likely a solution's prefix still ends right.

For the prefix that ends at step k (lines 0..k of the solution), the policy writes K completions; each whole text
(prefix + completion) is checked for its final answer. Then

    soft_k = (1/K) Σ_j 1[completion j ends right]     (Math-Shepherd's soft estimate, a Monte-Carlo Q of the prefix)
    hard_k = 1[soft_k > 0]                             (its hard estimate: some completion still gets there)

The last step is the answer line: nothing is left to complete, so its labels are the solution's own outcome. These
are the agent loop's Q̂ with the reasoning step as the action and the K completions as its rollouts
(targets/mc.py), without a discount: a reasoning episode's only reward is its answer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from agentprm.reason.check import steps
from agentprm.reason.problems import Problem


class Completer(Protocol):
    def complete(self, problems: Sequence[Problem], prefixes: Sequence[str], n: int, seed: int) -> list[list[str]]:
        """`n` continuations of each (problem, prefix): the rest of the solution after `prefix`, as text."""
        ...


@dataclass(frozen=True)
class StepLabels:
    soft: tuple[float, ...]   # one per step (line) of the solution
    hard: tuple[int, ...]


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
