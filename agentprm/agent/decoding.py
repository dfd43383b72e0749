"""How π samples beyond its temperature: the loop's `decoding:` section and the `--top-k`, `--top-p`, `--stop`,
`--max-new-tokens` flags of `rollout` and `eval` (agent/lm.py applies them). Each stage sets its own temperature
(rollouts, Best-of-N/beam, the policy update)."""
from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_MAX_NEW_TOKENS = 32


@dataclass
class Decoding:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS   # generate mode: a reply's token budget
    top_k: int = 0                  # sample among the k likeliest tokens (choose mode: commands); 0 = all
    top_p: float = 1.0              # sample among the likeliest whose probabilities sum to top_p (nucleus); 1 = all
    stop: list[str] = field(default_factory=list)   # generate mode: a reply ends before the first of these strings
