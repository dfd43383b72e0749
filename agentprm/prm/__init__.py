"""Stage-2 process reward model: `ProcessRewardModel` (backbone + scalar head), losses in a registry, training
from Q-targets (`train_prm`) and the held-out metrics."""
from agentprm.prm.losses import PRM_LOSSES, PrmLoss, get_prm_loss, register_prm_loss
from agentprm.prm.model import ProcessRewardModel
from agentprm.prm.train import PrmDataConfig, split_by_task, train_prm

__all__ = ["PRM_LOSSES", "PrmDataConfig", "PrmLoss", "ProcessRewardModel", "get_prm_loss", "register_prm_loss",
           "split_by_task", "train_prm"]
