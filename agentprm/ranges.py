"""The valid range of every numeric setting, declared once, by field name: a learning rate is > 0 and a γ is in
[0, 1] in whichever section declares one. The loop's config loader checks every section of a config file, and the
CLI checks every flag it generated from a section (commands/common.py `add_config_flags`), before any work: a typo is
a one-line error naming the field, never an hour of rollouts first. `tests/test_ranges.py` checks that every numeric
field of every section has a rule here and that an out-of-range value of each is refused both ways.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterator, NamedTuple

from agentprm.errors import UserError


class Range(NamedTuple):
    low: float
    high: float = math.inf
    low_open: bool = False      # low itself is out of range
    high_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below and math.isfinite(value)   # no setting means anything by inf or NaN

    def __str__(self) -> str:
        if self.high == math.inf:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


AT_LEAST_1, AT_LEAST_0, POSITIVE = Range(1), Range(0), Range(0, low_open=True)
PORT = Range(0, 65535)      # 0: a free one
SEED = Range(0, 2**31 - 1)   # a stage adds small offsets (seed + i, seed + 1000) and numpy takes < 2**32
THREADS = Range(0, 1024)     # torch segfaulted at 100000
UNIT, UNIT_HALF_OPEN, CORRELATION = Range(0, 1), Range(0, 1, high_open=True), Range(-1, 1)
PROBABILITY_MASS = Range(0, 1, low_open=True)   # a nucleus holds some mass

_BY_NAME = {
    AT_LEAST_1: ("iterations", "train", "eval", "steps", "batch_size", "batch_groups", "grad_accum", "per_task",
                 "max_steps", "eval_rows", "num_envs", "workers", "branch_probe", "continuation_states",
                 "continuation_candidates", "samples_per_state", "search_width", "search_expand", "search_per_task",
                 "episodes_per_task", "beam_expand", "ensemble_size", "monitor_states", "check_every", "eval_batch_size", "concurrency",
                 "replicas", "best_of", "max_model_len", "max_new_tokens", "report_every", "min_steps", "digits",
                 "per_problem", "prompts", "group", "ppo_epochs", "samples", "k", "beam", "every"),
    PORT: ("port",),
    SEED: ("seed",),
    THREADS: ("threads",),
    AT_LEAST_0: ("time_budget_s", "time_budget", "history_turns", "renumber_copies", "checkpoint_every",
                 "checkpoint_every_s", "r", "branches", "val_every",
                 "max_errors", "candidates", "min_margin", "search_tasks", "demo_tasks", "beam_width", "spro_beta", "entropy_coef", "kl_coef",
                 "probe_episodes", "prm_rise", "std_rise", "max_kl", "temperature", "bon_temperature",
                 "delta", "retries", "gigpo_omega", "top_k", "prior_weight", "prime_outcome_coef",
                 "prime_process_coef", "eval_every", "zeta", "layout_weight", "per_iteration", "validate"),
    POSITIVE: ("lr", "beta", "alpha", "clip", "epochs", "timeout_s", "timeout", "prime_lr"),
    UNIT: ("gamma", "gigpo_gamma", "shaping_alpha", "reset_frac", "steer_frac", "merge", "noisy", "filter_low",
           "filter_high"),
    PROBABILITY_MASS: ("top_p",),
    UNIT_HALF_OPEN: ("dropout", "heldout_frac", "val_frac"),
    CORRELATION: ("min_spearman",),
    Range(1, 1024): ("best_of_n",),   # each N of a list of Best-of-N runs (10^12 was an allocation first)
    Range(1, 10**6): ("num",),        # games or problems to generate (2·10^9 problems ran on for hours)
}
RULES: dict[str, Range] = {name: rule for rule, names in _BY_NAME.items() for name in names}
# Where a section means something else by a name: SFT's epochs = 0 (and then its steps) select the other schedule.
OVERRIDES: dict[str, Range] = {"SFTConfig.epochs": AT_LEAST_0, "SFTConfig.steps": AT_LEAST_0,
                               "ReasonRLConfig.group": Range(2),        # a group compares its responses
                               "ReasonRLConfig.beta": AT_LEAST_0,       # β = 0: SPRO is GRPO
                               "ChainConfig.digits": Range(1, 6)}


def rule_for(section: type, name: str) -> Range | None:
    return OVERRIDES.get(f"{section.__name__}.{name}", RULES.get(name))


def numeric_fields(section: type) -> Iterator[tuple[str, type, str]]:
    """(dotted path, declaring section, field name) of every int/float field, nested sections included."""
    defaults = section()
    for f in dataclasses.fields(section):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            yield from ((f"{f.name}.{path}", cls, name) for path, cls, name in numeric_fields(type(value)))
        elif f.type in ("int", "float", "int | None", "float | None") or (
                isinstance(value, (int, float)) and not isinstance(value, bool)):
            yield f.name, section, f.name


def check_value(section: type, name: str, value: Any, label: Callable[[], str]) -> None:
    rule = rule_for(section, name)
    if rule is None or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not rule.holds(value):
        raise UserError(f"{label()} must be {rule}, got {value!r}")


def check_section(obj: Any, label: Callable[[str], str]) -> None:
    """Every numeric field of the config dataclass `obj` (nested sections too) against its rule; `label(path)` says
    how the error names the field (a config file's 'prm.lr', a flag's --lr)."""
    for path, cls, name in numeric_fields(type(obj)):
        value = obj
        for part in path.split("."):
            value = getattr(value, part)
        check_value(cls, name, value, lambda p=path: label(p))
