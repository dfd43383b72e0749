"""Policies: SFT of π0 on demonstrations and the policy updates (stage 3); trained folders load with `LMAgent.load`
and are written by `agentprm.agent.checkpoint.save_policy`. The names load on first use, so `agentprm.policy.config`
— as every CLI parser imports it — does not import torch."""
from agentprm.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {"SFTConfig": "config", "train_sft": "sft"})
