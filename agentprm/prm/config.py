"""The PRM stages' settings, one dataclass each (see policy/config.py for why they live apart from the code):

    PrmConfig, PrmDataConfig  stage 2, Q_i from targets (prm/train.py; the loop's prm, `agentprm train-prm`)
    InversePrmConfig          InversePRM from demos (prm/inverse.py; the loop's inverse_prm)
    PrimeConfig               PRIME's implicit PRM (prm/prime.py; the loop's prime)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from agentprm.train.config import LoraConfig, TrainConfig


@dataclass
class PrmConfig:
    """The loop's `prm` section; `agentprm train-prm` takes the same fields as flags (`--init` is required there)."""
    loss: str = "soft-bce"          # soft-bce | bradley-terry | pqm | any registered PRM loss (prm/losses.py)
    init: str = "policy"            # "policy" = π_{i-1}'s weights, or a preset name / model folder
    epochs: float = 2.0
    max_steps: int | None = None    # at most this many optimiser steps (None = as epochs give): holds the PRM stage's
                                    # cost when rollouts grow (bench/iteration_cost.py at 10k); each example is then
                                    # seen fewer than `epochs` times
    eval_rows: int | None = None    # score each half (train, held-out) before and after training on at most this many
                                    # target rows, whole tasks drawn by the seed (None = all): with max_steps, a cost
                                    # that stays flat however many rollouts there are
    lr: float = 5e-4                # peak learning rate
    batch_size: int = 16
    grad_accum: int = 1             # micro-batches per step: the same training in less memory (train/core.py)
    lora: LoraConfig = field(default_factory=LoraConfig)   # adapters on the init model (the scalar head is trained
                                    # fully and saved with them) instead of every weight
    prior_weight: float = 0.0       # w > 0: Q = σ(f + w · log π_init(a|s)), the head a residual on the policy's own
                                    # ranking of its alternatives (prm/model.py); needs init "policy" or a policy folder
    history_turns: int | None = None   # earlier (action, observation) turns the PRM reads besides the current one;
                                    # None = as its init's prompt (the prior always reads its policy's own)
    show_admissible: bool | None = None   # list the state's admissible commands in the PRM's prompt; None = as its init

    def inputs(self) -> dict:
        """The PRM's prompt fields set here (the rest as its init's prompt): train_prm's `inputs`."""
        return {k: v for k in ("history_turns", "show_admissible") if (v := getattr(self, k)) is not None}

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.epochs, batch_size=self.batch_size, grad_accum=self.grad_accum,
                           max_steps=self.max_steps, seed=seed)

    def options(self) -> dict:
        """train_prm's keyword arguments set here (the loop's Q_i, the hacking detector's ensemble, `train-prm`)."""
        return {"lora": self.lora, "prior_weight": self.prior_weight, "inputs": self.inputs(),
                "eval_rows": self.eval_rows}


@dataclass
class PrmDataConfig:
    heldout_frac: float = 0.2    # share of tasks held out for evaluation
    delta: float = 0.0           # pairs (Bradley-Terry, pairwise accuracy): Q̂ gap must exceed this
    rollouts: str | None = None  # where the targets' states are; default: the path recorded in the targets file
    eval_batch_size: int = 32


@dataclass
class InversePrmConfig:
    """The loop's `inverse_prm` section (algo inverse-prm)."""
    gamma: float = 1.0              # Δ = f(s,a) − γ f(s′,a′) (the paper's code: 1)
    epochs: float = 2.0
    lr: float = 5e-4
    batch_size: int = 16
    demos: str | None = None        # expert trajectories; None = the run's demos.parquet (π0's SFT data when
                                    # policy0.retrain, else the expert played once per train task)

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.epochs, batch_size=self.batch_size, seed=seed)


@dataclass
class PrimeConfig:
    """The loop's `prime` section (algo prime)."""
    beta: float = 0.05              # implicit reward scale β in r = β log(π_φ/π_ref)
    epochs: float = 2.0
    lr: float = 1e-4
    batch_size: int = 4             # episodes per step (the loss is per episode)

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.epochs, batch_size=self.batch_size, seed=seed)
