"""Policies: SFT of π0 on demonstrations and the policy updates (stage 3); trained folders load with
`LMAgent.load`. The names below load on first use (PEP 562), so importing `agentprm.policy.config` — as every CLI
parser does — does not import torch."""
from __future__ import annotations

import importlib

_HOMES = {"SFTConfig": "agentprm.policy.config", "train_sft": "agentprm.policy.sft",
          "save_policy": "agentprm.agent.checkpoint"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'agentprm.policy' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
