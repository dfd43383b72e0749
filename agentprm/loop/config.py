"""The loop's configuration: one dataclass per stage, loaded from YAML with every unknown or mistyped field
reported as a one-line error naming the file and field. The resolved config is written to the run folder.

A stage's section is declared once, by the stage (policy/update.py `PolicyUpdateConfig`, policy/policy_gradient.py
`PolicyGradientConfig`, policy/hacking.py `HackingConfig`, …): the library functions, the CLI flags
(commands/common.py `add_config_flags`) and the loop all read that declaration. Sections only the loop has (tasks,
π0, exploration) are declared here."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentprm.envs.pool import POOLS
from agentprm.envs.registry import ENVS, get_env
from agentprm.errors import UserError
from agentprm.io import read_text
from agentprm.loop.algos import check_algorithm
from agentprm.agent.decoding import Decoding
from agentprm.agent.remote import BackendConfig, check_backend_config
from agentprm.models.device import DeviceConfig, check_device_config
from agentprm.ranges import check_section, check_value
from agentprm.search.critics import CRITICS
from agentprm.policy.update import UPDATES
from agentprm.policy.config import (HackingConfig, PolicyGradientConfig,
                                    PolicyUpdateConfig, SFTConfig)
from agentprm.prm.config import InversePrmConfig, PrimeConfig, PrmConfig
from agentprm.targets.mc import TargetsConfig
from agentprm.tracking import TrackingConfig
from agentprm.train.config import check_lora


@dataclass
class TasksConfig:
    env: str = "alfworld"           # the registered environment whose task generator makes the train/eval folders
    train: int = 24                 # generated train games (ignored when train_dir is set)
    eval: int = 36                  # generated eval games, floor plans disjoint from train
    types: list[str] | None = None  # task types (default: all six, balanced)
    train_dir: str | None = None    # use an existing task folder (generated or official ALFWorld) instead
    eval_dir: str | None = None
    per_iteration: int = 0          # train tasks each iteration rolls out, drawn afresh from the train split (the
                                    # on-policy regime: small batches, many iterations); 0 = every train task
    validate: int = 0               # a tuning run: this many train games, drawn by the seed and never trained on, are
                                    # what every eval plays instead of the eval split (not generated, never seen), so
                                    # settings are chosen without the eval games; 0 = off


@dataclass
class Policy0Config:
    path: str | None = None         # π0 folder; None = the bundled default policy
    retrain: bool = False           # SFT π0 from expert demos of the train tasks instead
    demo_tasks: int = 0             # retrain: the expert's demos of the first this-many games of the generated train
                                    # split instead (a superset of the loop's train tasks; 0 = the train tasks)
    sft: SFTConfig = field(default_factory=SFTConfig)   # how (policy/sft.py; `agentprm sft` has the same flags);
                                    # algo sft also fine-tunes each π_i for `sft.epochs` passes


@dataclass
class RolloutConfig:
    per_task: int = 6               # rollouts of π_{i-1} per train task (paper: 16)
    temperature: float = 1.0        # exploration during stage-1 rollouts
    mode: str = "choose"            # "choose" among admissible commands, or free "generate"
    max_steps: int = 30             # step budget per rollout episode
    num_envs: int = 16              # episodes played at once, their policy calls batched per turn
    workers: int | None = None      # env worker processes (default: CPU count)
    branches: int = 0               # algo agentprm: branch episodes per rollout episode, each replaying it to a turn
                                    # where π would act otherwise and playing that other action (rollout/branch.py):
                                    # MC targets for two actions at one state; 0 = off
    branch_probe: int = 4           # samples from π per visited state to find those turns and actions
    max_errors: int = 0             # episodes with an env error (a broken game, a lost worker) a rollout or eval
                                    # stage accepts; more fail the stage, which is then not marked complete
    pool: str = "local"             # env workers as local processes, or as Ray actors (envs/ray_pool.py)
    ray_address: str = ""           # pool ray: the cluster to join ("" = a local Ray started on first use)


@dataclass
class EvalConfig:
    episodes_per_task: int = 1      # eval episodes per eval task
    every: int = 1                  # evaluate π_i (and its search rows) every this many iterations, and the last;
                                    # π0 always
    max_steps: int = 30             # step budget per eval episode
    best_of_n: list[int] = field(default_factory=lambda: [4])   # Best-of-N with Q_i after each iteration
    bon_temperature: float = 0.7    # sampling temperature of Best-of-N and beam search
    beam_width: int = 2             # beam search with (π_i, Q_i) after each iteration: branches kept (0 = off)
    beam_expand: int = 2            # replies sampled per branch and turn (width·expand samples a turn, as Best-of-4)
    critic_control: bool = True     # also play every search with a uniform critic, the control that says how much
                                    # of the search's gain is Q_i's (each search row is compared with its control)
    policy_control: bool = False    # also play every search ranked by π_i's own log π (search/policy.py), the
                                    # critic-free control: what Q_i adds over π's confidence in its own commands


@dataclass
class ExplorationConfig:
    reset_frac: float = 0.0         # share of stage-1 rollouts started on an expert trajectory (Reset-50-50: 0.5)
    steer_frac: float = 0.0         # share of stage-3 generations with the steered prompt (the paper's code: 0.5)


@dataclass
class LoopConfig:
    algo: str = "agentprm"
    seed: int = 0
    iterations: int = 1
    checkpoint_every_s: float = 600.0   # seconds between checkpoints of a training inside a stage (weights, optimizer,
                                        # scheduler, RNG: a killed run resumes mid-training; train/checkpoint.py); 0 = off
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
    hacking: HackingConfig = field(default_factory=HackingConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)   # where every model of the run lives
    backend: BackendConfig = field(default_factory=BackendConfig)   # how rollouts and evals run π: in-process, or
                                    # (backend: openai) through a vLLM server the loop starts for each policy
    decoding: Decoding = field(default_factory=Decoding)   # how π samples in rollouts and evals besides the
                                    # temperature: top-k, top-p, and in generate mode the token budget and stop strings
    tracking: TrackingConfig = field(default_factory=TrackingConfig)   # --report-to: TensorBoard, W&B, MLflow

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def quickstart_config(**top: Any) -> LoopConfig:
    """`agentprm quickstart`'s job (configs/quickstart.yaml spells it out): one AgentPRM iteration from the bundled π0
    with the defaults, at the budget where the PRM's effect is resolved on one seed — 48 train tasks × 6 rollouts,
    then π0, π1, beam 2x2 with (π1, Q1) and the same beam with a uniform critic on 216 eval games (paired). Best-of-N
    is left out: Q ranks π's alternatives at one state at chance on unseen games (docs/results.md), and its two rows
    would cost 4 minutes; so is the beam's log-π control (`eval.policy_control`, configs/quickstart-controls.yaml),
    whose 2–3 minutes would take a fresh clone past 15. `top`: top-level fields (seed, algo, device)."""
    cfg = LoopConfig(**top)
    cfg.tasks.train, cfg.tasks.eval, cfg.eval.best_of_n = 48, 216, []
    return cfg


def _build(cls, data: Any, where: str, source: str):
    if not isinstance(data, dict):
        raise UserError(f"{source}: field '{where or 'top level'}' must be a mapping")
    known = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            raise UserError(f"{source}: unknown field {path!r} (known: {', '.join(known)})")
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, path, source)
        else:
            kwargs[key] = _checked(value, default, path, source, hints[key])
            for i, v in enumerate(kwargs[key] if isinstance(kwargs[key], list) else ()):   # a list's numbers: the
                check_value(cls, key, v, lambda i=i: f"{source}: field '{path}[{i}]'")    # field's range, each
    try:
        return cls(**kwargs)
    except UserError as e:   # a section's own check of its values (e.g. PromptConfig's format): say where
        raise UserError(f"{source}: field '{where or 'top level'}': {e}") from None


def _list_of(hint: Any) -> Any:
    """The element type of a list field (`list[int]`, `list[str] | None`), else None."""
    for h in (hint, *typing.get_args(hint)):
        if typing.get_origin(h) is list:
            return (typing.get_args(h) or (Any,))[0]
    return None


EXAMPLES = {bool: False, int: 0, float: 0.0, str: ""}   # a value of each scalar type, to check an element against


def _checked(value: Any, default: Any, path: str, source: str, hint: Any = None) -> Any:
    if value is None:
        return value
    element = _list_of(hint)
    if element is not None:   # a list field: a list, each element of the element type
        if not isinstance(value, list):
            raise UserError(f"{source}: field '{path}' must be a list, got {value!r}")
        if element in EXAMPLES:
            return [_checked(v, EXAMPLES[element], f"{path}[{i}]", source) for i, v in enumerate(value)]
        return value
    if default is None:   # an optional field (`int | None`): checked against its type's example value
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(kinds) != 1 or kinds[0] not in (bool, int, float, str):
            return value
        default = kinds[0]()
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UserError(f"{source}: field '{path}' must be true/false, got {value!r}")
        return value
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UserError(f"{source}: field '{path}' must be a number, got {value!r}")
        if isinstance(default, int) and not isinstance(value, int):
            if not value.is_integer():   # 2.5 iterations, or NaN / inf
                raise UserError(f"{source}: field '{path}' must be a whole number, got {value!r}")
            value = int(value)
        return type(default)(value) if isinstance(default, float) else value
    if isinstance(default, str) and not isinstance(value, str):
        raise UserError(f"{source}: field '{path}' must be a string, got {value!r}")
    if isinstance(default, list) and not isinstance(value, list):
        raise UserError(f"{source}: field '{path}' must be a list, got {value!r}")
    return value


TARGET_SOURCES = ("mc", "continuation")
ROLLOUT_MODES = ("choose", "generate")


# Fields renamed since earlier versions, read from run folders those wrote: (section, old name) -> path in the section
LEGACY = {("policy0", "sft_epochs"): ("sft", "epochs"), ("policy0", "sft_model"): ("sft", "model"),
          ("policy0", "sft_time_budget_s"): ("sft", "time_budget_s")}


def _migrated(data: dict) -> dict:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in (data or {}).items()}
    for (section, old), (sub, new) in LEGACY.items():
        part = data.get(section)
        if isinstance(part, dict) and old in part:
            nested = dict(part.get(sub) or {})
            nested.setdefault(new, part.pop(old))
            part[sub] = nested
    return data


def from_dict(data: dict, source: str = "config") -> LoopConfig:
    from agentprm.prm.losses import PRM_LOSSES

    cfg = _build(LoopConfig, _migrated(data), "", source)
    where = lambda path: f"{source}: field '{path}'"  # noqa: E731
    check_section(cfg, where)   # every numeric field's range (agentprm/ranges.py)
    for path, value, known in (("rollout.mode", cfg.rollout.mode, ROLLOUT_MODES), ("rollout.pool", cfg.rollout.pool, POOLS),
                               ("prm.loss", cfg.prm.loss, tuple(PRM_LOSSES)),
                               ("targets.source", cfg.targets.source, TARGET_SOURCES),
                               ("policy.method", cfg.policy.method, tuple(UPDATES))):
        if value not in known:
            raise UserError(f"{source}: field '{path}' must be one of {', '.join(known)}, got {value!r}")
    if not CRITICS.knows(cfg.policy.critic) or cfg.policy.critic == "layout":   # layout needs a prior file
        raise UserError(f"{where('policy.critic')} must be a registered critic "
                        f"({', '.join(n for n in CRITICS if n != 'layout')}), got {cfg.policy.critic!r}")
    try:
        get_env(cfg.tasks.env)   # registered, or by its package's entry point
    except UserError:
        raise UserError(f"{where('tasks.env')} must be a registered environment ({', '.join(ENVS)}), got "
                        f"{cfg.tasks.env!r}") from None
    check_algorithm(cfg, LoopConfig(), where)   # the algorithm's entry owns its fields and checks (loop/algos/)
    if cfg.eval.beam_width and cfg.eval.beam_width * cfg.eval.beam_expand < 2:   # 1x1 would be one sampled reply
        raise UserError(f"{source}: field 'eval.beam_width' × 'eval.beam_expand' must be at least 2 samples per turn "
                        f"(or beam_width 0: off), got {cfg.eval.beam_width} × {cfg.eval.beam_expand}")
    if cfg.tasks.validate:
        check_tuning_run(cfg, where)
    if any(n < 2 for n in cfg.eval.best_of_n):  # N = 1 would be reported as the greedy policy's row
        raise UserError(f"{source}: field 'eval.best_of_n' entries must be at least 2, got {cfg.eval.best_of_n}")
    if not cfg.policy0.sft.epochs and cfg.policy0.sft.steps < 1:   # SFT counts steps unless given epochs
        raise UserError(f"{source}: field 'policy0.sft.steps' must be at least 1 when policy0.sft.epochs is 0, got "
                        f"{cfg.policy0.sft.steps}")
    update = UPDATES[cfg.policy.method]   # what the update's registry entry says applies to it (policy/update.py)
    if not update.watchable and (cfg.hacking.enabled or cfg.exploration.steer_frac):
        raise UserError(f"{where('policy.method')} {update.name} is not online DPO: no hacking detector and no steered "
                        "exploration")
    if update.choose_only and cfg.rollout.mode != "choose":
        raise UserError(f"{where('policy.method')} {update.name} scores every admissible command: it needs "
                        "rollout.mode choose")
    if cfg.policy.search_tasks and (not update.searches or cfg.tasks.train_dir
                                    or cfg.policy.search_tasks < cfg.tasks.train):
        raise UserError(f"{where('policy.search_tasks')} is for a searching policy.method (beam-distill) on a generated"
                        f" train split, at least tasks.train ({cfg.tasks.train}) games; set it to 0")
    if cfg.policy.critic == "uniform" and cfg.hacking.enabled:
        raise UserError(f"{source}: field 'policy.critic' uniform is a control without a PRM to watch: disable hacking")
    if cfg.policy.distinct and cfg.rollout.mode != "choose":
        raise UserError(f"{source}: field 'policy.distinct' needs rollout.mode 'choose' (got {cfg.rollout.mode!r})")
    check_device_config(cfg.device, f"{source}: section 'device'")
    check_backend_config(cfg.backend, f"{source}: section 'backend'")
    for name in ("base_url", "served_model"):   # the loop serves each policy itself (loop/run.py load_agent)
        if getattr(cfg.backend, name) != getattr(BackendConfig(), name):
            raise UserError(f"{source}: field 'backend.{name}' is not for the loop: with backend openai it starts a "
                            "vLLM server for each policy itself (remove the field)")
    for path, lora in (("policy0.sft.lora", cfg.policy0.sft.lora), ("prm.lora", cfg.prm.lora),
                       ("policy.lora", cfg.policy.lora), ("policy_gradient.lora", cfg.policy_gradient.lora)):
        check_lora(lora, f"{source}: field {path}")
    return cfg


def check_tuning_run(cfg: LoopConfig, where) -> None:
    """`tasks.validate` > 0: evals play held-out train games, so nothing may read the eval split or train on them."""
    if cfg.tasks.eval_dir:
        raise UserError(f"{where('tasks.validate')}: a tuning run evaluates on held-out train games, never on the eval "
                        "split: remove tasks.eval_dir (or set validate 0)")
    if cfg.policy0.demo_tasks or cfg.policy.search_tasks:   # those read the whole generated train split
        raise UserError(f"{where('tasks.validate')}: policy0.demo_tasks and policy.search_tasks read the whole "
                        "generated train split, the held-out games too: set them to 0 in a tuning run")
    if not cfg.tasks.train_dir and cfg.tasks.validate >= cfg.tasks.train:
        raise UserError(f"{where('tasks.validate')} must leave train games to train on: below tasks.train "
                        f"({cfg.tasks.train}), got {cfg.tasks.validate}")


class StrictLoader(yaml.SafeLoader):
    """YAML as a config needs it: a repeated key (the later one silently won) and aliases (`*name`: the road to alias
    bombs and self-referencing documents) are errors with the line they are on."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed here; write the value out",
                                              mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"repeated key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path, what: str = "config") -> dict:
    """A YAML mapping from `path` (a config or sweep file); one-line errors for a missing file, bad YAML (repeated
    keys and aliases included) or a non-mapping."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such {what} file")
    try:
        data = yaml.load(read_text(path), Loader=StrictLoader) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{path}: not valid YAML ({problem}{where})") from None
    except ValueError as e:   # a number past Python's 4,300-digit limit
        raise UserError(f"{path}: not valid YAML ({str(e).split(':')[0]})") from None
    except RecursionError:   # nesting deep enough to exhaust the parser's stack
        raise UserError(f"{path}: not valid YAML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a mapping of fields, got {type(data).__name__}")
    return data


def load_config(path: str | Path) -> LoopConfig:
    return from_dict(read_yaml(path), str(path))


def dump_config(cfg: LoopConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
