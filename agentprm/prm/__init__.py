"""Stage-2 process reward model: `ProcessRewardModel` (backbone + scalar head), losses in a registry, training
from Q-targets (`train_prm`) and the held-out metrics. The names below load on first use (PEP 562), so importing
`agentprm.prm.config` — as every CLI parser does — does not import torch."""
from __future__ import annotations

import importlib

_HOMES = {"PRM_LOSSES": "losses", "PrmLoss": "losses", "get_prm_loss": "losses", "register_prm_loss": "losses",
          "ProcessRewardModel": "model", "PrmDataConfig": "config", "split_by_task": "train", "train_prm": "train"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'agentprm.prm' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentprm.prm.{_HOMES[name]}"), name)
