"""Policies: supervised fine-tuning of π0 on demonstrations; the trained folders load with `LMAgent.load`."""
from agentprm.policy.sft import SFTConfig, save_policy, train_sft

__all__ = ["SFTConfig", "save_policy", "train_sft"]
