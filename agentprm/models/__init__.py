"""Models: small Llama presets and loaders for any local Hugging Face causal LM (the env's word-level tokenizer
for models trained from scratch is `agentprm.agent.tokenizer`), and where they are placed (`device.py`); the names
load on first use, so `agentprm.models.device` imports without transformers."""
from agentprm.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "PRESETS": "presets", "build_model": "presets", "load_causal_lm": "presets", "load_tokenizer": "presets",
    "register_preset": "presets", "resolve_model": "presets", "DeviceConfig": "device", "place": "device",
    "use_device": "device"})
