"""Step-level beam search: a solution grown one line at a time, the partial solutions ranked by a step PRM.

    sampler = StepSampler(model, tokenizer)                        # the policy writes the next line
    results = step_beam(sampler, prm_scorer(prm, "min"), problems, width=4, expand=4, seed=0)

At each depth every live beam (a solution prefix, a tuple of lines) is extended by `expand` sampled next lines
(generation stops at the newline or the end of the turn). The candidates of a problem — duplicates merged — are
scored by `score` (a step PRM's step scores aggregated by min / last / product, or a control), and the best `width`
are kept: those that ended (end of turn, token budget, or `max_lines`) go to the problem's finished pool, the rest
live on. The answer is the best-scored finished solution. With width W and expansion K a depth generates up to W·K
lines, so a search costs about as many generated tokens as Best-of-(W·K) whole solutions (`SearchResult.tokens`
counts them; prefixes are re-read each depth, which tokens do not count).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Sequence

from agentprm.errors import require
from agentprm.reason.model import HFCompleter, response_text
from agentprm.reason.problems import Problem
from agentprm.reason.step_prm import StepPRM, aggregate

Lines = tuple[str, ...]
Scorer = Callable[[Sequence[Problem], Sequence[Lines]], list[float]]


@dataclass(frozen=True)
class SearchResult:
    solution: str
    score: float
    tokens: int         # tokens generated for this problem over the whole search


class StepSampler(HFCompleter):
    """Next lines of solution prefixes from a local causal LM: an `HFCompleter` whose generation also ends at a
    newline."""

    def __init__(self, model, tokenizer, temperature: float = 1.0, max_line_tokens: int = 32):
        self.newline = tokenizer("\n", add_special_tokens=False)["input_ids"][-1]
        super().__init__(model, tokenizer, temperature, max_line_tokens, stop_ids=(self.newline,))

    def next_lines(self, problems: Sequence[Problem], prefixes: Sequence[Lines], n: int,
                   seed: int) -> list[list[tuple[str, bool, int]]]:
        """For each (problem, prefix): n sampled next lines as (text, ended, tokens generated); `ended` when the
        line closed the turn or ran out of tokens without a newline."""
        texts = ["".join(line + "\n" for line in x) for x in prefixes]
        return [[(response_text(self.tokenizer, seq, self.end).strip(), not seq or seq[-1] != self.newline, len(seq))
                 for seq in ids] for ids in self.generate_ids(problems, texts, n, seed)]


def prm_scorer(prm: StepPRM, how: str = "min", batch_size: int = 64) -> Scorer:
    """A step PRM's scores of a prefix's lines, aggregated (step_prm.py `aggregate`)."""
    def score(problems: Sequence[Problem], prefixes: Sequence[Lines]) -> list[float]:
        steps = prm.step_scores(problems, ["\n".join(x) for x in prefixes], batch_size)
        return [aggregate(s, how) for s in steps]
    return score


def random_scorer(seed: int) -> Scorer:
    """The control: a seeded hash of (problem, prefix) in [0, 1) — the same search with no judgement."""
    def score(problems: Sequence[Problem], prefixes: Sequence[Lines]) -> list[float]:
        keys = (f"{seed}\0{p.id}\0{p.question}\0" + "\n".join(x) for p, x in zip(problems, prefixes))
        return [int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "big") / 2 ** 64 for k in keys]
    return score


def step_beam(sampler: StepSampler, score: Scorer, problems: Sequence[Problem], width: int, expand: int, seed: int,
              max_lines: int = 8) -> list[SearchResult]:
    """Beam search over solution lines for every problem at once (the depths' generations batched across problems)."""
    require(width >= 1 and expand >= 1 and max_lines >= 1,
            f"beam: width, expand and max_lines must be >= 1 (got {width}, {expand}, {max_lines})")
    live: list[list[Lines]] = [[()] for _ in problems]
    finished: list[list[tuple[float, Lines]]] = [[] for _ in problems]
    tokens = [0] * len(problems)
    for depth in range(max_lines):
        refs = [(i, prefix) for i, beams in enumerate(live) for prefix in beams]
        if not refs:
            break
        drawn = sampler.next_lines([problems[i] for i, _ in refs], [x for _, x in refs], expand, seed + 1009 * depth)
        candidates: list[dict[Lines, bool]] = [{} for _ in problems]
        for (i, prefix), lines in zip(refs, drawn):
            for text, ended, n in lines:
                tokens[i] += n
                grown = prefix + (text,) if text else prefix
                if grown:   # an empty first line that ends the turn leaves nothing to score
                    candidates[i][grown] = candidates[i].get(grown, False) or ended or depth == max_lines - 1
        flat = [(i, x) for i, c in enumerate(candidates) for x in c]
        scores = score([problems[i] for i, _ in flat], [x for _, x in flat]) if flat else []
        ranked: list[list[tuple[float, Lines]]] = [[] for _ in problems]
        for (i, x), s in zip(flat, scores):
            ranked[i].append((s, x))
        live = [[] for _ in problems]
        for i, options in enumerate(ranked):
            for s, x in sorted(options, key=lambda o: -o[0])[:width]:
                if candidates[i][x]:
                    finished[i].append((s, x))
                else:
                    live[i].append(x)
    results = []
    for i in range(len(problems)):
        s, x = max(finished[i], key=lambda o: o[0], default=(float("-inf"), ()))
        results.append(SearchResult("\n".join(x), s, tokens[i]))
    return results
