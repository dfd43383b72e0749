"""Verifiable multi-step reasoning: problems whose final answer *and every step* a checker can judge, the worked
solutions a tiny model learns from, step labels and the metrics step PRMs are judged by.

The agent side of the toolkit is turn-level (a turn = an environment action); here a response is one generated text
and a *step* is one of its lines. The stages mirror the agent loop's:

    problems.py   the problems: a generated family with seeds, difficulty knobs and disjoint splits, or a user's JSONL
    check.py      the checkers: every step of a chain-arithmetic solution, or a final answer alone (pluggable)
    solutions.py  worked solutions to learn from: correct, with steps merged, or with one error of a known kind
    labels.py     Monte-Carlo step labels (Math-Shepherd): K completions from each step's prefix
    metrics.py    first-error F1 (ProcessBench) and calibration (expected calibration error, reliability bins)
"""
