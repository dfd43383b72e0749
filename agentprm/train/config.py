"""`TrainConfig`: the optimisation settings of the one training core (train/core.py), and `LoraConfig`, what is
trained (every weight, or low-rank adapters: models/lora.py) — kept apart from the code so that the config sections
built on them, and every CLI parser generated from them, load without torch."""
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


@dataclass
class LoraConfig:
    """LoRA adapters through peft (models/lora.py): the `lora` part of the SFT, PRM and policy-update sections, the
    `--lora-*` flags of `sft`, `train-prm` and `train-policy`. r = 0 trains every weight."""
    r: int = 0                            # adapter rank (0 = off: every weight is trained)
    alpha: float = 16.0                   # the adapter's update is scaled by alpha / r
    dropout: float = 0.05                 # dropout on the adapter's input
    target_modules: str = "all-linear"    # comma-separated module names, or "all-linear" (every linear layer but the
                                          # output head)
    merge: bool = False                   # save merged full weights (a plain model folder) instead of the adapter

    def to_dict(self) -> dict:
        return asdict(self)
