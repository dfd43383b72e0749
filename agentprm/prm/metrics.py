"""How well predicted Q_φ matches the targets Q̂: soft BCE, Spearman rank correlation, pairwise accuracy at a state.
Undefined values (constant inputs, no pairs) are None, so summaries stay valid JSON."""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

EPS = 1e-7


def bce(pred: Sequence[float], target: Sequence[float]) -> float | None:
    p, q = np.clip(np.asarray(pred, np.float64), EPS, 1 - EPS), np.asarray(target, np.float64)
    return float(-np.mean(q * np.log(p) + (1 - q) * np.log(1 - p))) if len(q) else None


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.r_[0, np.flatnonzero(sorted_x[1:] != sorted_x[:-1]) + 1]
    ends = np.r_[starts[1:], len(x)]
    r = np.empty(len(x))
    r[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return r


def spearman(pred: Sequence[float], target: Sequence[float]) -> float | None:
    a, b = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    if len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def pairwise_accuracy(pred: Sequence[float], target: Sequence[float], groups: Sequence[str],
                      delta: float = 0.0) -> tuple[float | None, int]:
    """Share of pairs in the same group (state) with target gap > δ that `pred` orders the same way (a tie in
    `pred` counts half); and the number of such pairs."""
    rows: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        rows[g].append(i)
    right, n = 0.0, 0
    for idx in rows.values():
        for i in idx:
            for j in idx:
                if target[i] - target[j] > delta:
                    n += 1
                    right += 1.0 if pred[i] > pred[j] else 0.5 if pred[i] == pred[j] else 0.0
    return (right / n if n else None), n


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """The area under the ROC curve: P(a positive's score > a negative's), ties counted half (the Mann-Whitney U
    over |positive|·|negative|). 0.5 for a score that cannot tell them apart."""
    ranked = sorted([(v, 1) for v in positive] + [(v, 0) for v in negative])
    rank_sum, i = 0.0, 0
    while i < len(ranked):   # average ranks over ties
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        rank_sum += sum(1 for k in range(i, j) if ranked[k][1]) * (i + j + 1) / 2
        i = j
    n1, n0 = len(positive), len(negative)
    return (rank_sum - n1 * (n1 + 1) / 2) / (n1 * n0)
