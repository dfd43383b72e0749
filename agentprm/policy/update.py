"""Stage 3: the policy update a loop config's `policy` section names, run against a critic (Q_i or the oracle), with
the metadata a saved π_i records. `PolicyUpdateConfig` is that section — the loop's YAML, `agentprm train-policy`'s
flags and both update methods read this one declaration (docs/algorithms.md §1, §6)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from agentprm.train.core import TrainConfig


@dataclass
class PolicyUpdateConfig:
    method: str = "online-dpo"      # "online-dpo" (the paper's); "kl-distill": π ∝ π_{i-1}·exp(Q_i/β) over the
                                    # admissible set, distilled (choose mode; policy/kl_distill.py); "beam-distill":
                                    # SFT of π_{i-1} on what beam search with (π_{i-1}, Q_i) does on the train tasks
                                    # (expert iteration; policy/beam_distill.py)
    beta: float = 0.03              # KL weight to π_{i-1} (paper 0.03) of online DPO and kl-distill
    candidates: int = 4             # kl-distill: commands re-weighted per state, top by π_{i-1} (0 = all admissible)
    samples_per_state: int = 2      # online DPO: replies drawn per state, best vs worst by Q_i (paper: 2)
    temperature: float = 0.7        # for those replies, and beam-distill's search samples (paper: 0.7)
    min_margin: float = 0.0         # a state's pair needs Q_i(best) − Q_i(worst) > this (filters noisy preferences)
    distinct: bool = False          # choose mode: a state's samples are different commands, so each state gives a pair
                                    # (beam-distill: each branch expands into different commands)
    critic: str = "prm"             # what ranks the samples: "prm" (Q_i), "oracle" (rollout/oracle.py: Q^π_{i-1}
                                    # measured by greedy continuations in the simulator: a bound, not a method) or
                                    # "uniform" (seeded random scores: the control with a critic that knows nothing)
    search_width: int = 2           # beam-distill: beam width (branches kept per turn)
    search_expand: int = 2          # beam-distill: replies sampled per branch and turn (at `temperature`)
    search_per_task: int = 1        # beam-distill: searches per train task
    search_tasks: int = 0           # beam-distill: search on the first this-many games of the generated train split
                                    # (a superset of the loop's train tasks; 0 = the loop's train tasks)
    won_only: bool = True           # beam-distill: imitate the won search episodes only (the train tasks' outcome)
    steps: int = 60                 # optimiser steps, each on `batch_size` rollout states (beam-distill: search steps)
    batch_size: int = 8
    lr: float = 1e-4

    def train_config(self, n_states: int, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.steps * self.batch_size / max(1, n_states),
                           batch_size=self.batch_size, warmup_frac=0.0, seed=seed, log_every=max(1, self.steps // 20))

    def to_dict(self) -> dict:
        return asdict(self)


METHODS = ("online-dpo", "kl-distill", "beam-distill")
CRITICS = ("prm", "oracle", "uniform")


def run_update(policy, critic, states: Sequence, p: PolicyUpdateConfig, seed: int, reference: str,
               progress: bool = True, on_log=None, steer_frac: float = 0.0, tasks: Sequence = (),
               max_steps: int = 30, workers: int = 2) -> tuple[str, dict]:
    """Update `policy` in place by `p.method`; returns the metadata key ("online_dpo" | "kl_distill" |
    "beam_distill") and {"config", "seed", "history", "reference", ...}. `on_log`/`steer_frac` apply to online DPO;
    `reference` names π_{i-1}'s folder (the update's frozen reference is a copy of `policy` taken at the start);
    beam-distill searches on `tasks` (`max_steps`, `workers`) and ignores `states`."""
    from agentprm.policy.kl_distill import train_kl_distill
    from agentprm.policy.online_dpo import train_online_dpo

    meta = {"config": p.to_dict(), "seed": seed, "reference": reference}
    if p.method == "beam-distill":
        from agentprm.agent.lm import LMAgent
        from agentprm.policy.beam_distill import search_episodes, train_beam_distill

        # samples π_{i-1}: the search runs before the model is trained
        sampler = LMAgent(policy.backend, policy.tokenizer, policy.prompt_cfg, mode=policy.mode,
                          temperature=p.temperature, seed=seed, name=policy.name, distinct=p.distinct)
        episodes, _ = search_episodes(sampler, critic, tasks, p, max_steps=max_steps, seed=seed, workers=workers)
        history, distilled = train_beam_distill(policy, episodes, p, seed, progress=progress)
        return "beam_distill", {**meta, "history": history, **distilled}
    if p.method == "kl-distill":
        return "kl_distill", {**meta, "history": train_kl_distill(policy, critic, states, p, seed, progress=progress)}
    history, steered = train_online_dpo(policy, critic, states, p, seed, progress=progress, on_log=on_log,
                                        steer_frac=steer_frac)
    return "online_dpo", {**meta, "history": history, "steer_frac": steer_frac, "steered_states": steered}
