"""`TrainConfig`: the optimisation settings of the one training core (train/core.py), kept apart from it so that
the config sections built on it — and every CLI parser generated from them — load without torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class TrainConfig:
    lr: float = 1e-3            # peak learning rate
    epochs: float = 1.0         # passes over the examples (fractional allowed)
    batch_size: int = 16
    warmup_frac: float = 0.05   # share of steps with linear warm-up
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    time_budget_s: float = 0.0  # stop early after this many seconds (0 = no budget)
    seed: int = 0
    log_every: int = 50

    def to_dict(self) -> dict:
        return asdict(self)
