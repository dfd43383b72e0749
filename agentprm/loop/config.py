"""The loop's configuration: one dataclass per stage, loaded from YAML with every unknown or mistyped field
reported as a one-line error naming the file and field. The resolved config is written to the run folder."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentprm.errors import UserError


@dataclass
class TasksConfig:
    train: int = 24                 # generated train games (ignored when train_dir is set)
    eval: int = 36                  # generated eval games, floor plans disjoint from train
    types: list[str] | None = None  # task types (default: all six, balanced)
    train_dir: str | None = None    # use an existing task folder (generated or official ALFWorld) instead
    eval_dir: str | None = None


@dataclass
class Policy0Config:
    path: str | None = None         # π0 folder; None = the bundled default policy
    retrain: bool = False           # SFT π0 from expert demos of the train tasks instead
    sft_epochs: float = 3.0
    sft_model: str = "tiny"
    sft_time_budget_s: float = 0.0


@dataclass
class RolloutConfig:
    per_task: int = 6               # rollouts of π_{i-1} per train task (paper: 16)
    temperature: float = 1.0        # exploration during stage-1 rollouts
    mode: str = "choose"            # "choose" among admissible commands, or free "generate"
    max_steps: int = 30
    num_envs: int = 16
    workers: int | None = None      # env worker processes (default: CPU count)
    branches: int = 0               # algo agentprm: branch episodes per rollout episode, each replaying it to a turn
                                    # where π would act otherwise and playing that other action (rollout/branch.py):
                                    # MC targets for two actions at one state; 0 = off
    branch_probe: int = 4           # samples from π per visited state to find those turns and actions


@dataclass
class TargetsConfig:
    gamma: float = 0.9              # discount, counted from each turn to the episode end. < 1 so that, among won
                                    # episodes (most of them), a step that wins sooner scores higher; with 1 every
                                    # step of a won episode has Q̂ = 1 (docs/results.md: 0.9 vs 1 on two seeds)
    shaping_alpha: float = 0.0      # process reward shaping (algo agentprm): mix Q̂ with π0's advantage A^μ by this
                                    # weight (0 = off; paper 0.5); V^μ is fitted once to π0's iteration-1 rollouts
    source: str = "mc"              # "mc": Monte-Carlo Q̂ of the sampling policy (the paper's); "continuation":
                                    # Q of greedy π_{i-1} for its top commands at sampled rollout states, each played
                                    # out once (targets/continuation.py: same-state alternatives)
    continuation_states: int = 600  # source continuation: rollout states sampled
    continuation_candidates: int = 4  # … and π_{i-1}'s top commands played out at each


@dataclass
class PrmConfig:
    loss: str = "soft-bce"          # soft-bce | bradley-terry | any registered PRM loss
    init: str = "policy"            # "policy" = π_{i-1}'s weights, or a preset name / model folder
    epochs: float = 2.0
    lr: float = 5e-4
    batch_size: int = 16


@dataclass
class PolicyUpdateConfig:
    method: str = "online-dpo"      # "online-dpo" (the paper's), or "kl-distill": π ∝ π_{i-1}·exp(Q_i/β) over the
                                    # admissible set, distilled (choose mode; policy/kl_distill.py)
    beta: float = 0.03              # KL weight to π_{i-1} (paper 0.03); the same β in both methods
    candidates: int = 4             # kl-distill: commands re-weighted per state, top by π_{i-1} (0 = all admissible)
    samples_per_state: int = 2      # replies drawn per state, best vs worst by Q_i (paper: 2)
    temperature: float = 0.7        # for those replies (paper: 0.7)
    min_margin: float = 0.0         # a state's pair needs Q_i(best) − Q_i(worst) > this (filters noisy preferences)
    distinct: bool = False          # choose mode: a state's samples are different commands, so each state gives a pair
    critic: str = "prm"             # what ranks the samples: "prm" (Q_i) or "oracle" (rollout/oracle.py: Q^π_{i-1}
                                    # measured by greedy continuations in the simulator: a bound, not a method)
    steps: int = 60
    batch_size: int = 8
    lr: float = 1e-4


@dataclass
class EvalConfig:
    episodes_per_task: int = 1
    max_steps: int = 30
    best_of_n: list[int] = field(default_factory=lambda: [4])   # Best-of-N with Q_i after each iteration
    bon_temperature: float = 0.7


@dataclass
class InversePrmConfig:
    gamma: float = 1.0              # Δ = f(s,a) − γ f(s′,a′) (the paper's code: 1)
    epochs: float = 2.0
    lr: float = 5e-4
    batch_size: int = 16
    demos: str | None = None        # expert trajectories; None = the run's demos.parquet (π0's SFT data when
                                    # policy0.retrain, else the expert played once per train task)


@dataclass
class ExplorationConfig:
    reset_frac: float = 0.0         # share of stage-1 rollouts started on an expert trajectory (Reset-50-50: 0.5)
    steer_frac: float = 0.0         # share of stage-3 generations with the steered prompt (the paper's code: 0.5)


@dataclass
class PolicyGradientConfig:
    """algo: grpo | spro. Groups are the `rollout.per_task` episodes of π_{i-1} on each train task."""
    spro_beta: float = 0.05         # SPRO process-reward β (the paper leaves it unreported); grpo always uses 0
    clip: float = 0.2               # PPO clip range
    entropy_coef: float = 0.001     # entropy bonus (SPRO: 0.001)
    steps: int = 20
    batch_groups: int = 2           # tasks (groups) per optimiser step
    lr: float = 1e-4


@dataclass
class HackingDetectorConfig:
    """Reward-hacking detector during the online-DPO update (agentprm/policy/hacking.py, docs/reward-hacking.md)."""
    enabled: bool = False
    ensemble_size: int = 3          # PRMs whose disagreement is measured: Q_i and ensemble_size − 1 more, fitted to
                                    # the same targets with other seeds (so other task splits)
    monitor_states: int = 16        # rollout states held out of the update and scored at every check
    probe_episodes: int = 0         # greedy episodes of π_θ per check, one per train task, for the probe Spearman
    check_every: int = 10           # policy steps between checks
    prm_rise: float = 0.05          # alarm when mean Q_i of greedy replies rises more than this since step 0 …
    std_rise: float = 0.02          # … and the ensemble std rises more than this
    min_spearman: float = 0.0       # alarm when the probe Spearman(Q_i, return) falls below this
    max_kl: float = 0.0             # alarm when the KL proxy to π_{i-1} exceeds this (0 = off)
    stop_on_alarm: bool = False     # end the update at the first alarm (π_i = the policy at that check)


@dataclass
class PrimeConfig:
    beta: float = 0.05              # implicit reward scale β in r = β log(π_φ/π_ref)
    epochs: float = 2.0
    lr: float = 1e-4
    batch_size: int = 4             # episodes per step (the loss is per episode)


@dataclass
class LoopConfig:
    algo: str = "agentprm"
    seed: int = 0
    iterations: int = 1
    tasks: TasksConfig = field(default_factory=TasksConfig)
    policy0: Policy0Config = field(default_factory=Policy0Config)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    targets: TargetsConfig = field(default_factory=TargetsConfig)
    prm: PrmConfig = field(default_factory=PrmConfig)
    policy: PolicyUpdateConfig = field(default_factory=PolicyUpdateConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    policy_gradient: PolicyGradientConfig = field(default_factory=PolicyGradientConfig)
    inverse_prm: InversePrmConfig = field(default_factory=InversePrmConfig)
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    prime: PrimeConfig = field(default_factory=PrimeConfig)
    hacking: HackingDetectorConfig = field(default_factory=HackingDetectorConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _build(cls, data: Any, where: str, source: str):
    if not isinstance(data, dict):
        raise UserError(f"{source}: field '{where or 'top level'}' must be a mapping")
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            raise UserError(f"{source}: unknown field '{path}' (known: {', '.join(known)})")
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, path, source)
        else:
            kwargs[key] = _checked(value, default, path, source)
    return cls(**kwargs)


def _checked(value: Any, default: Any, path: str, source: str) -> Any:
    if default is None or value is None:
        return value
    if isinstance(default, bool) != isinstance(value, bool):
        raise UserError(f"{source}: field '{path}' must be true/false, got {value!r}")
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UserError(f"{source}: field '{path}' must be a number, got {value!r}")
        return type(default)(value) if isinstance(default, float) else value
    if isinstance(default, str) and not isinstance(value, str):
        raise UserError(f"{source}: field '{path}' must be a string, got {value!r}")
    if isinstance(default, list) and not isinstance(value, list):
        raise UserError(f"{source}: field '{path}' must be a list, got {value!r}")
    return value


# Fields that are shares or mixing weights: outside [0, 1] they are a typo, caught before any stage runs.
FRACTIONS = ("targets.shaping_alpha", "exploration.reset_frac", "exploration.steer_frac")


CRITICS = ("prm", "oracle")
TARGET_SOURCES = ("mc", "continuation")
POLICY_METHODS = ("online-dpo", "kl-distill")


def from_dict(data: dict, source: str = "config") -> LoopConfig:
    cfg = _build(LoopConfig, data or {}, "", source)
    if any(n < 2 for n in cfg.eval.best_of_n):  # N = 1 would be reported as the greedy policy's row
        raise UserError(f"{source}: field 'eval.best_of_n' entries must be at least 2, got {cfg.eval.best_of_n}")
    for path, value, least in (("rollout.branches", cfg.rollout.branches, 0),
                               ("rollout.branch_probe", cfg.rollout.branch_probe, 1)):
        if value < least:
            raise UserError(f"{source}: field '{path}' must be at least {least}, got {value}")
    if cfg.rollout.branches and cfg.algo != "agentprm":
        raise UserError(f"{source}: field 'rollout.branches' is for algo agentprm (algo {cfg.algo} uses its rollouts "
                        "as on-policy groups); set it to 0")
    if cfg.targets.source not in TARGET_SOURCES:
        raise UserError(f"{source}: field 'targets.source' must be one of {', '.join(TARGET_SOURCES)}, "
                        f"got {cfg.targets.source!r}")
    if cfg.targets.source == "continuation" and (cfg.targets.shaping_alpha or cfg.algo != "agentprm"):
        raise UserError(f"{source}: field 'targets.source' continuation is for algo agentprm without shaping")
    for path, value in (("targets.continuation_states", cfg.targets.continuation_states),
                        ("targets.continuation_candidates", cfg.targets.continuation_candidates)):
        if value < 1:
            raise UserError(f"{source}: field '{path}' must be at least 1, got {value}")
    if cfg.policy.method not in POLICY_METHODS:
        raise UserError(f"{source}: field 'policy.method' must be one of {', '.join(POLICY_METHODS)}, "
                        f"got {cfg.policy.method!r}")
    if cfg.policy.method == "kl-distill" and (cfg.rollout.mode != "choose" or cfg.hacking.enabled
                                              or cfg.exploration.steer_frac):
        raise UserError(f"{source}: field 'policy.method' kl-distill needs rollout.mode choose, no hacking detector "
                        "and no steered exploration")
    if cfg.policy.critic not in CRITICS:
        raise UserError(f"{source}: field 'policy.critic' must be one of {', '.join(CRITICS)}, got {cfg.policy.critic!r}")
    if cfg.policy.critic == "oracle" and (cfg.algo != "agentprm" or cfg.hacking.enabled):
        raise UserError(f"{source}: field 'policy.critic' oracle is for algo agentprm without the hacking detector")
    if cfg.policy.distinct and cfg.rollout.mode != "choose":
        raise UserError(f"{source}: field 'policy.distinct' needs rollout.mode 'choose' (got {cfg.rollout.mode!r})")
    for path in FRACTIONS:
        section, name = path.split(".")
        value = getattr(getattr(cfg, section), name)
        if not 0.0 <= value <= 1.0:
            raise UserError(f"{source}: field '{path}' must be in [0, 1], got {value!r}")
    return cfg


def load_config(path: str | Path) -> LoopConfig:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    return from_dict(data, str(path))


def dump_config(cfg: LoopConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
