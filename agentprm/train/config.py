"""`TrainConfig`: the optimisation settings of the one training core (train/core.py), and `LoraConfig`, what is
trained (every weight, or low-rank adapters: models/lora.py) — kept apart from the code so that the config sections
built on them, and every CLI parser generated from them, load without torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from agentprm.errors import UserError


@dataclass
class TrainConfig:
    lr: float = 1e-3            # peak learning rate
    epochs: float = 1.0         # passes over the examples (fractional allowed)
    steps: int = 0              # optimiser steps instead of epochs (0 = from epochs)
    max_steps: int | None = None   # at most this many steps from epochs (None = no cap): big data, bounded cost
    batch_size: int = 16        # the global batch: over all processes and micro-batches
    grad_accum: int = 1         # micro-batches per optimiser step (gradient accumulation; same result, less memory)
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

    def module_names(self) -> list[str]:
        return [t.strip() for t in self.target_modules.split(",") if t.strip()]

    def to_dict(self) -> dict:
        return asdict(self)


def check_lora(cfg: LoraConfig, where: str = "lora") -> None:
    """Bad LoRA settings as a one-line error before any work (`where` names the field's prefix)."""
    for name, bad, rule in (("r", cfg.r < 0, ">= 0"), ("alpha", cfg.r > 0 and cfg.alpha <= 0, "> 0"),
                            ("dropout", not 0.0 <= cfg.dropout < 1.0, "in [0, 1)"),
                            ("target_modules", cfg.r > 0 and not cfg.module_names(), "a module name or all-linear")):
        if bad:
            raise UserError(f"{where}.{name} must be {rule} (got {getattr(cfg, name)!r})")
