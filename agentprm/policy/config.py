"""The policy stages' settings, one dataclass each — the single declaration of each's defaults, the loop's YAML
section and the CLI flags generated from it (commands/common.py). Kept apart from the training code, like TRL's
`*_config.py`, so that configs and `--help` load without torch:

    SFTConfig             π0 from demos (policy/sft.py; the loop's policy0.sft, `agentprm sft`)
    PolicyUpdateConfig    stage 3 against a critic (policy/update.py; the loop's policy, `agentprm train-policy`)
    PolicyGradientConfig  GRPO / SPRO (policy/policy_gradient.py; the loop's policy_gradient)
    HackingConfig         the reward-hacking detector (policy/hacking.py; the loop's hacking)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from agentprm.agent.encoding import PromptConfig
from agentprm.train.config import LoraConfig, TrainConfig


@dataclass
class SFTConfig:
    """`agentprm sft`'s flags and the loop's `policy0.sft` section (π0 retrained from expert demos). The defaults are
    the recipe that gave working policies from scratch (docs/results.md): a step count, not passes, since a tiny
    model only learns to pick the task's object up after ~2-3 k steps whatever the data size, and renumbered copies."""
    model: str = "tiny"            # a preset name (trained from scratch) or a local HF model folder (fine-tuned)
    lr: float = 1e-3               # peak learning rate (from-scratch presets like high rates; use ~1e-5 for a real LM)
    steps: int = 6000              # optimiser steps (the bundled π0: 6,150)
    epochs: float = 0.0            # passes over the examples instead of `steps` (0 = use steps)
    batch_size: int = 16
    grad_accum: int = 1            # micro-batches per step: the same training in less memory (train/core.py)
    time_budget_s: float = 0.0     # stop after this many seconds (0 = none); the LR schedule then ends there
    prompt: PromptConfig = field(default_factory=PromptConfig)  # how states are rendered; saved with the model
    won_only: bool = True          # train on successful demos only
    renumber_copies: int = 1       # augmentation: extra copies of each episode with object/receptacle instance
                                   # numbers permuted, so the model must read names instead of memorising them
    checkpoint_every: int = 0      # also save the policy every this many steps (0 = never) to
                                   # <out>-checkpoints/step-<n>: the success-vs-training-time curve
    lora: LoraConfig = field(default_factory=LoraConfig)   # adapters instead of every weight (a model folder only)
    val_frac: float = 0.1          # demo games held out (whole games, before augmentation) to measure next-command
                                   # accuracy during training; 0 = train on all (none is held out below 10 games)
    val_every: int = 0             # steps between validation measurements (0 = ten over the run, and the last step)
    keep_best: bool = False        # save the weights of the measurement with the best validation accuracy, not the last

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.epochs, steps=0 if self.epochs else self.steps,
                           batch_size=self.batch_size, grad_accum=self.grad_accum, time_budget_s=self.time_budget_s,
                           seed=seed)


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
    critic: str = "prm"             # what ranks the samples (search/critics.py): "prm" (Q_i), "oracle" (Q^π_{i-1}
                                    # measured by greedy continuations in the simulator: a bound, not a method),
                                    # "uniform" (seeded random scores: the control with a critic that knows nothing),
                                    # "logpi" (π_{i-1}'s own log π), or a critic registered from outside
    search_width: int = 2           # beam-distill: beam width (branches kept per turn)
    search_expand: int = 2          # beam-distill: replies sampled per branch and turn (at `temperature`)
    search_per_task: int = 1        # beam-distill: searches per train task
    search_tasks: int = 0           # beam-distill: search on the first this-many games of the generated train split
                                    # (a superset of the loop's train tasks; 0 = the loop's train tasks)
    won_only: bool = True           # beam-distill: imitate the won search episodes only (the train tasks' outcome)
    steps: int = 60                 # optimiser steps, each on `batch_size` rollout states (beam-distill: search steps)
    batch_size: int = 8
    lr: float = 1e-4
    lora: LoraConfig = field(default_factory=LoraConfig)   # adapters on π_{i-1} instead of every weight

    def train_config(self, n_states: int, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.steps * self.batch_size / max(1, n_states),
                           batch_size=self.batch_size, warmup_frac=0.0, seed=seed, log_every=max(1, self.steps // 20))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PolicyGradientConfig:
    """The loop's `policy_gradient` section (algo grpo | spro | gigpo). Groups are the `rollout.per_task` episodes
    of π_{i-1} on each train task."""
    advantage: str = ""            # algo grpo: the advantage estimator (policy/advantages.py: grpo, rloo, spro, gigpo,
                                   # or one registered from outside); "" = the algorithm's own (algo spro: spro, …)
    spro_beta: float = 0.05        # SPRO's β on the cumulative process reward (its paper leaves it unreported);
                                   # the grpo estimator always uses 0 (outcome only)
    spro_reference: str = "initial"   # SPRO's π_ref: "initial" = π0, frozen (its paper), or "previous" = π_{i-1} (then
                                   # the process reward starts at 0 each iteration and SPRO's first step is GRPO's)
    gigpo_omega: float = 1.0       # GiGPO's ω: weight of the anchor-state step advantage (its paper: 1)
    gigpo_gamma: float = 0.95      # GiGPO's γ of the step returns compared within an anchor group (its paper: 0.95)
    gigpo_std_norm: bool = True    # GiGPO: divide by the group's std (verl-agent mean_std_norm), else mean only
    clip: float = 0.2              # PPO clip range ε
    entropy_coef: float = 0.001    # c_H (SPRO: 0.001)
    kl_coef: float = 0.0           # β of a KL(π_θ ‖ π0) penalty, π0 frozen (DeepSeekMath's GRPO, its k3 estimator per
                                   # turn); 0 = none. What holds a many-iteration run near π0 (docs/onpolicy.md)
    steps: int = 20                # optimiser steps
    batch_groups: int = 2          # groups (tasks) per step
    lr: float = 1e-4
    lora: LoraConfig = field(default_factory=LoraConfig)   # adapters on π_{i-1} instead of every weight

    def train_config(self, n_groups: int, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, epochs=self.steps * self.batch_groups / max(1, n_groups),
                           batch_size=self.batch_groups, warmup_frac=0.0, seed=seed,
                           log_every=max(1, self.steps // 20))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class HackingConfig:
    """The loop's `hacking` section: the detector during the online-DPO update (docs/reward-hacking.md)."""
    enabled: bool = False
    ensemble_size: int = 3         # PRMs whose disagreement is measured: Q_i and ensemble_size − 1 more, fitted to
                                   # the same targets with other seeds (so other task splits)
    monitor_states: int = 16       # rollout states held out of the update and scored at every check
    probe_episodes: int = 0        # greedy episodes of π_θ per check, one per train task, for the probe Spearman
    check_every: int = 10          # policy steps between checks (a check runs at the first logged step past it)
    samples_per_state: int = 2     # replies sampled per monitor state for ens_std and kl (at the update's temperature)
    prm_rise: float = 0.05         # alarm: mean Q_i of greedy replies rose more than this since the baseline …
    std_rise: float = 0.02         # … while the ensemble's mean std rose more than this
    min_spearman: float = 0.0      # alarm: probe Spearman(Q_i, return) below this (checks with a probe only)
    max_kl: float = 0.0            # alarm: KL proxy above this (0 = off)
    stop_on_alarm: bool = False    # stop the policy update at the first alarm (π_i = the policy at that check)

    def to_dict(self) -> dict:
        return asdict(self)
