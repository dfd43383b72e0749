"""Stage 3: the policy update a loop config's `policy` section names, run against a critic (Q_i or the oracle), with
the metadata a saved π_i records. `PolicyUpdateConfig` is that section — the loop's YAML, `agentprm train-policy`'s
flags and both update methods read this one declaration (docs/algorithms.md §1, §6)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from agentprm.train.core import TrainConfig


@dataclass
class PolicyUpdateConfig:
    method: str = "online-dpo"      # "online-dpo" (the paper's), or "kl-distill": π ∝ π_{i-1}·exp(Q_i/β) over the
                                    # admissible set, distilled (choose mode; policy/kl_distill.py)
    beta: float = 0.03              # KL weight to π_{i-1} (paper 0.03); the same β in both methods
    candidates: int = 4             # kl-distill: commands re-weighted per state, top by π_{i-1} (0 = all admissible)
    samples_per_state: int = 2      # online DPO: replies drawn per state, best vs worst by Q_i (paper: 2)
    temperature: float = 0.7        # for those replies (paper: 0.7)
    min_margin: float = 0.0         # a state's pair needs Q_i(best) − Q_i(worst) > this (filters noisy preferences)
    distinct: bool = False          # choose mode: a state's samples are different commands, so each state gives a pair
    critic: str = "prm"             # what ranks the samples: "prm" (Q_i) or "oracle" (rollout/oracle.py: Q^π_{i-1}
                                    # measured by greedy continuations in the simulator: a bound, not a method)
    steps: int = 60                 # optimiser steps, each on `batch_size` fresh rollout states
    batch_size: int = 8
    lr: float = 1e-4

    def train_config(self, n_states: int, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.steps * self.batch_size / max(1, n_states),
                           batch_size=self.batch_size, warmup_frac=0.0, seed=seed, log_every=max(1, self.steps // 20))

    def to_dict(self) -> dict:
        return asdict(self)


METHODS = ("online-dpo", "kl-distill")
CRITICS = ("prm", "oracle")


def run_update(policy, critic, states: Sequence, p: PolicyUpdateConfig, seed: int, reference: str,
               progress: bool = True, on_log=None, steer_frac: float = 0.0) -> tuple[str, dict]:
    """Update `policy` in place by `p.method`; returns the metadata key ("online_dpo" | "kl_distill") and {"config",
    "seed", "history", "reference", ...}. `on_log`/`steer_frac` apply to online DPO; `reference` names π_{i-1}'s
    folder (the update's frozen reference is a copy of `policy` taken at the start)."""
    from agentprm.policy.kl_distill import train_kl_distill
    from agentprm.policy.online_dpo import train_online_dpo

    meta = {"config": p.to_dict(), "seed": seed, "reference": reference}
    if p.method == "kl-distill":
        return "kl_distill", {**meta, "history": train_kl_distill(policy, critic, states, p, seed, progress=progress)}
    history, steered = train_online_dpo(policy, critic, states, p, seed, progress=progress, on_log=on_log,
                                        steer_frac=steer_frac)
    return "online_dpo", {**meta, "history": history, "steer_frac": steer_frac, "steered_states": steered}
