"""Stage-2 process reward model: `ProcessRewardModel` (backbone + scalar head), losses in a registry, training
from Q-targets (`train_prm`) and the held-out metrics; the names load on first use, so `agentprm.prm.config` — as
every CLI parser imports it — does not import torch."""
from agentprm.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "PRM_LOSSES": "losses", "PrmLoss": "losses", "get_prm_loss": "losses", "register_prm_loss": "losses",
    "ProcessRewardModel": "model", "PrmDataConfig": "config", "split_by_task": "train", "train_prm": "train"})
