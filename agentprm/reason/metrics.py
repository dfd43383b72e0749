"""How a step PRM is judged against the checker's ground truth.

**First-error F1** (ProcessBench, arXiv 2412.06559): a PRM's scores over a solution's steps predict its first error
as the first step scored below `threshold` (or no error when none is). Over a set of solutions with their true first
errors (check.py's `Verdict.first_error`; None for a correct solution):

    acc_error   = share of the solutions *with* an error whose first error is predicted at exactly its step
    acc_correct = share of the solutions *without* one predicted to have none
    F1          = 2 · acc_error · acc_correct / (acc_error + acc_correct)

The harmonic mean keeps a PRM that flags everything (acc_correct 0) or nothing (acc_error 0) at F1 0. A solution
that ends without an answer has its first error at len(steps), past its last scored step: only "no error" can be
predicted for it, and that is wrong.

**Calibration**: step scores read as probabilities p against 0/1 outcomes y (e.g. whether a step's prefix still
leads to the right answer). Equal-width bins over [0, 1]; the reliability table is each bin's count, mean p and mean
y; the expected calibration error ECE = Σ_b (n_b / N) · |mean y_b − mean p_b|.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def predicted_first_error(scores: Sequence[float], threshold: float = 0.5) -> int | None:
    return next((k for k, s in enumerate(scores) if s < threshold), None)


@dataclass(frozen=True)
class FirstErrorScore:
    acc_error: float | None      # None when no solution has an error
    acc_correct: float | None    # None when every solution has one
    f1: float
    n_error: int
    n_correct: int


def first_error_f1(scores: Sequence[Sequence[float]], first_errors: Sequence[int | None],
                   threshold: float = 0.5) -> FirstErrorScore:
    if len(scores) != len(first_errors):
        raise ValueError(f"{len(scores)} score lists for {len(first_errors)} solutions")
    hits = {True: [], False: []}     # has an error -> whether the prediction was right
    for s, truth in zip(scores, first_errors):
        hits[truth is not None].append(predicted_first_error(s, threshold) == truth)
    acc = {k: sum(v) / len(v) if v else None for k, v in hits.items()}
    a, b = acc[True], acc[False]
    f1 = 2 * a * b / (a + b) if a is not None and b is not None and a + b > 0 else 0.0
    return FirstErrorScore(a, b, f1, len(hits[True]), len(hits[False]))


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    mean_p: float | None
    mean_y: float | None


def reliability(probs: Sequence[float], outcomes: Sequence[float], bins: int = 10) -> list[Bin]:
    """Equal-width bins over [0, 1] (p = 1 falls in the last); empty bins have None means."""
    if len(probs) != len(outcomes):
        raise ValueError(f"{len(probs)} probabilities for {len(outcomes)} outcomes")
    members: list[list[tuple[float, float]]] = [[] for _ in range(bins)]
    for p, y in zip(probs, outcomes):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a probability must lie in [0, 1], not {p}")
        members[min(int(p * bins), bins - 1)].append((p, y))
    return [Bin(k / bins, (k + 1) / bins, len(m), sum(p for p, _ in m) / len(m) if m else None,
                sum(y for _, y in m) / len(m) if m else None) for k, m in enumerate(members)]


def expected_calibration_error(probs: Sequence[float], outcomes: Sequence[float], bins: int = 10) -> float:
    table = reliability(probs, outcomes, bins)
    n = sum(b.count for b in table)
    return sum(b.count / n * abs(b.mean_y - b.mean_p) for b in table if b.count) if n else 0.0
