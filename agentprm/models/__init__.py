"""Models: small Llama presets and loaders for any local Hugging Face causal LM (the env's word-level tokenizer
for models trained from scratch is `agentprm.agent.tokenizer`)."""
from agentprm.models.presets import PRESETS, build_model, load_causal_lm, load_tokenizer, register_preset

__all__ = ["PRESETS", "build_model", "load_causal_lm", "load_tokenizer", "register_preset"]
