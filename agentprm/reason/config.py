"""The settings of the reasoning stages, one dataclass each: the single source of their defaults and of the
`agentprm reason` flags generated from them (kept apart from the code so the CLI's parsers load without torch)."""
from __future__ import annotations

from dataclasses import dataclass, field

from agentprm.errors import require
from agentprm.train.config import LoraConfig, TrainConfig

ALGOS = ("grpo", "spro", "prime")
STEP_LOSSES = ("bce", "pqm", "orm")
AGGREGATIONS = ("min", "last", "product")   # a solution's score from its step scores (step_prm.py `aggregate`)


@dataclass
class ChainConfig:
    """The chain-arithmetic family's knobs (`agentprm reason problems`; problems.py)."""
    min_steps: int = 2          # instructions per problem, at least ...
    max_steps: int = 3          # ... and at most
    digits: int = 2             # digits of the start number and of each added or subtracted number
    ops: str = "+-"             # the operations drawn from: any of + - * (a multiplier is one digit)


@dataclass
class ReasonerConfig:
    """SFT of the reasoning policy on worked solutions (`agentprm reason sft`; model.py, solutions.py)."""
    model: str = "tiny"         # a preset (trained from scratch, with `reasoning_tokenizer`) or a local HF model folder
    steps: int = 6000
    batch_size: int = 32
    lr: float = 1e-3
    time_budget_s: float = 0.0
    per_problem: int = 1        # worked solutions written per problem
    merge: float = 0.3          # chance that a line also carries the next instruction of its precedence class
    noisy: float = 0.3          # share of solutions with one error (a slip, a misread number or a skipped instruction)
    lora: LoraConfig = field(default_factory=LoraConfig)   # adapters instead of every weight (a model folder only)

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(lr=self.lr, steps=self.steps, batch_size=self.batch_size, time_budget_s=self.time_budget_s,
                           seed=seed, log_every=max(1, self.steps // 50))


@dataclass
class ReasonRLConfig:
    """Token-level process RL (`agentprm reason rl`; rl.py)."""
    algo: str = "spro"            # grpo | spro | prime
    steps: int = 100              # RL steps (each samples a fresh batch)
    prompts: int = 16             # problems per step
    group: int = 8                # responses per problem (G)
    temperature: float = 1.0
    max_new_tokens: int = 96
    lr: float = 1e-4              # (5e-4 lost 7-9 points of eval accuracy in 30 GRPO steps; 1e-4 gained 11)
    clip: float = 0.2             # ε
    ppo_epochs: int = 1           # gradient steps per batch
    beta: float = 0.05            # SPRO's process-reward β (its paper does not report one); PRIME's implicit-PRM β
    entropy_coef: float = 0.001   # c_H (SPRO's paper: 0.001)
    filter_low: float = 0.0       # the accuracy filter: keep a group whose accuracy lies in [low, high]
    filter_high: float = 1.0
    prime_lr: float = 1e-4        # the implicit PRM's learning rate
    prime_outcome_coef: float = 5.0   # c_o
    prime_process_coef: float = 5.0   # c_p
    eval_every: int = 10          # greedy accuracy on the eval problems every this many steps (0 = only at the end)
    lora: LoraConfig = field(default_factory=LoraConfig)   # adapters on the policy; π_ref = the adapters switched off

    def check(self) -> None:
        require(self.algo in ALGOS, f"reason rl: algo must be one of {', '.join(ALGOS)}, not {self.algo!r}")
        require(self.group >= 2, f"reason rl: group must be >= 2 (a group compares its responses), not {self.group}")
        require(0.0 <= self.filter_low <= self.filter_high <= 1.0,
                f"reason rl: need 0 <= filter_low <= filter_high <= 1 (got {self.filter_low}, {self.filter_high})")
        require(self.steps >= 1 and self.prompts >= 1, "reason rl: steps and prompts must be >= 1")


@dataclass
class StepPRMConfig:
    """The step PRM (step_prm.py)."""
    loss: str = "bce"          # bce | pqm | orm
    labels: str = "soft"       # bce's target: soft (share of completions that end right) or hard (any does)
    steps: int = 600
    batch_size: int = 32
    lr: float = 5e-4
    zeta: float = 4.0          # PQM's margin (the authors' default, prm/pqm.py DEFAULT_ZETA)

    def check(self) -> None:
        require(self.loss in STEP_LOSSES, f"step PRM: loss must be one of {', '.join(STEP_LOSSES)}, not {self.loss!r}")
        require(self.labels in ("soft", "hard"), f"step PRM: labels must be soft or hard, not {self.labels!r}")


