"""Policies: supervised fine-tuning of π0 on demonstrations; the trained folders load with `LMAgent.load`."""
from agentprm.agent.checkpoint import save_policy
from agentprm.policy.sft import SFTConfig, train_sft

__all__ = ["SFTConfig", "save_policy", "train_sft"]
