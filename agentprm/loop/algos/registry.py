"""The algorithm registry: one entry per algorithm the loop can run (`algo:` in the config, `--algo` on quickstart).

An entry owns everything the loop needs to know about its algorithm:

- `iteration(ctx, prev) -> IterationResult(policy, critic)` is the recipe: iteration `ctx.i`'s stages, read top to
  bottom — rollouts of `prev` (π_{i-1}) on this iteration's train tasks, targets, critic, update — each run through
  `ctx.stages` (so each is resumable). `ctx` (IterationContext) is the narrow view of the run a recipe gets: its
  config, this iteration's tasks, and the shared stages (rollouts, the expert's demos, π0). The recipe returns what
  it produced and never evaluates it: the loop (loop/run.py, the one driver) schedules the iterations and evaluates
  each result (`eval.every`);
- `uses`: the optional config fields it honours. A field some algorithm lists is refused at load time, with a
  one-line error, under an algorithm that does not list it (it would be ignored). "path" covers every non-default
  value of the field, "path=value" that one value;
- `check(cfg, where)`: its own load-time checks; `where(path)` is the prefix of the error ("<file>: field 'path'").

    @register_algorithm("my-algo", uses=("rollout.branches",))
    def iteration(ctx, prev):
        rollouts = ctx.rollouts(prev)
        policy = ctx.stages.run(f"iter_{ctx.i}/policy", f"iter_{ctx.i}/policy", lambda out: ...)
        return IterationResult(policy)

The built-in algorithms are registered by importing `agentprm.loop.algos`; an algorithm of your own by importing the
file that registers it before the config is loaded (tests/test_architecture.py plugs one in from outside).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agentprm.errors import UserError
from agentprm.registry import Registry

if TYPE_CHECKING:
    from agentprm.loop.config import LoopConfig
    from agentprm.loop.stages import StageRunner

# the fields of stage 3 as loop/policy_stage.py runs it (online DPO can be steered and watched by the detector)
POLICY_UPDATE_FIELDS = ("exploration.steer_frac", "hacking.enabled")


@dataclass(frozen=True)
class IterationResult:
    """What one iteration produced, for the loop to evaluate: π_i's folder and, for an algorithm that fits one, the
    critic Q_i's (the test-time search rows — Best-of-N, beam — are played with it; None: greedy π_i only)."""
    policy: Path
    critic: Path | None = None


@dataclass(frozen=True)
class IterationContext:
    """The part of a run one iteration sees. `tasks`: this iteration's train tasks (all of the train split, or the
    `tasks.per_iteration` drawn for iteration i); `train_pool`: the whole train split (the expert's demos cover it).
    The callables are the loop's shared, resumable stages."""
    i: int
    cfg: LoopConfig
    stages: StageRunner
    tasks: list
    train_pool: list
    progress: bool
    rollouts_of: Callable[..., Path]    # (i, policy, tasks, demos=None) -> π's rollouts on tasks, stage iter_<i>
    demos_of: Callable[[list], Path]    # (tasks) -> the expert's episodes on them, stage demos.parquet
    policy0: Callable[[], Path]         # π0's folder (the frozen reference of SPRO, the value model's init)
    batch_of: Callable[[int], list]     # (j) -> iteration j's train tasks

    @property
    def seed(self) -> int:
        """Iteration i's seed: the run's seed + i."""
        return self.cfg.seed + self.i

    def rollouts(self, policy: Path, demos=None) -> Path:
        """Stage iter_<i>/rollouts: `rollout.per_task` episodes of `policy` on this iteration's tasks."""
        return self.rollouts_of(self.i, policy, self.tasks, demos)

    def demos(self) -> Path:
        """The expert's episodes on the whole train split (π0's SFT data; InversePRM's positives)."""
        return self.demos_of(self.train_pool)


@dataclass(frozen=True)
class Algorithm:
    name: str
    iteration: Callable
    uses: tuple[str, ...] = ()
    check: Callable[[LoopConfig, Callable[[str], str]], None] | None = None


ALGORITHMS: Registry[Algorithm] = Registry("algorithm")


def register_algorithm(name: str, uses: tuple[str, ...] = (), check: Callable | None = None):
    """Decorator adding an iteration function under `name`; a name already taken is refused."""
    def add(fn: Callable) -> Callable:
        ALGORITHMS.add(name, Algorithm(name, fn, tuple(uses), check))
        return fn
    return add


def get_algorithm(name: str) -> Algorithm:
    return ALGORITHMS.entry(name)


def _value(cfg: LoopConfig, path: str):
    section, name = path.split(".")
    return getattr(getattr(cfg, section), name)


def check_algorithm(cfg: LoopConfig, default: LoopConfig, where: Callable[[str], str]) -> None:
    """The algorithm exists; no optional field is set that it would ignore; its own checks pass."""
    if cfg.algo not in ALGORITHMS:
        raise UserError(f"{where('algo')} must be one of {', '.join(sorted(ALGORITHMS))}, got {cfg.algo!r}")
    algo = ALGORITHMS[cfg.algo]
    claimed: dict[str, list[str]] = {}   # optional field (or field=value) -> the algorithms that honour it
    for other in ALGORITHMS.values():
        for item in other.uses:
            claimed.setdefault(item, []).append(other.name)
    for item, users in claimed.items():
        path, _, value = item.partition("=")
        now = _value(cfg, path)
        is_set = str(now) == value if value else now != _value(default, path)
        if is_set and item not in algo.uses:
            raise UserError(f"{where(path)}{' ' + value if value else ''} applies to algo {' / '.join(users)}; "
                            f"algo {cfg.algo} would ignore it (remove it)")
    if algo.check is not None:
        algo.check(cfg, where)
