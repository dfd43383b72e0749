"""The algorithm registry: one entry per algorithm the loop can run (`algo:` in the config, `--algo` on quickstart).

An entry owns everything the loop needs to know about its algorithm:

- `iteration(loop, i, prev_policy, train_tasks, eval_tasks) -> new_policy_dir` runs iteration i's stages through
  `loop.stages` (so each is resumable) and evaluates what it produced (`loop.evaluate_iteration`); the shared stages
  (tasks, π0, rollouts, eval) live on `Loop` in loop/run.py;
- `uses`: the optional config fields it honours. A field some algorithm lists is refused at load time, with a
  one-line error, under an algorithm that does not list it (it would be ignored). "path" covers every non-default
  value of the field, "path=value" that one value;
- `check(cfg, where)`: its own load-time checks; `where(path)` is the prefix of the error ("<file>: field 'path'").

    @register_algorithm("my-algo", uses=("rollout.branches",))
    def iteration(loop, i, prev, train_tasks, eval_tasks): ...

The built-in algorithms are registered by importing `agentprm.loop.algos`; an algorithm of your own by importing the
file that registers it before the config is loaded (tests/test_architecture.py plugs one in from outside).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from agentprm.errors import UserError
from agentprm.registry import Registry

if TYPE_CHECKING:
    from agentprm.loop.config import LoopConfig

# the fields of stage 3 as loop/policy_stage.py runs it (online DPO can be steered and watched by the detector)
POLICY_UPDATE_FIELDS = ("exploration.steer_frac", "hacking.enabled")


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
