"""Models: the env word-level tokenizer, small Llama presets, and loaders for any local Hugging Face causal LM."""
from agentprm.models.presets import PRESETS, build_model, load_causal_lm, load_tokenizer, register_preset
from agentprm.models.tokenizer import build_tokenizer

__all__ = ["PRESETS", "build_model", "build_tokenizer", "load_causal_lm", "load_tokenizer", "register_preset"]
