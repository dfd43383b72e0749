"""Models: small Llama presets and loaders for any local Hugging Face causal LM (the env's word-level tokenizer
for models trained from scratch is `agentprm.agent.tokenizer`), and where they are placed (`device.py`). The names
below load on first use (PEP 562), so `agentprm.models.device` imports without transformers."""
from __future__ import annotations

import importlib

_HOMES = {"PRESETS": "presets", "build_model": "presets", "load_causal_lm": "presets", "load_tokenizer": "presets",
          "register_preset": "presets", "DeviceConfig": "device", "place": "device", "use_device": "device"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'agentprm.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentprm.models.{_HOMES[name]}"), name)
