"""Critics by name: the one place where a name becomes a `Critic` (agent/critic.py) — for `agentprm eval --prm`,
the loop's searches and controls, and the policy update's `policy.critic`. An entry is a factory with one signature,
`make(ctx: CriticContext) -> Critic`; it reads the fields of the context it needs and no others.

    prm       the learned PRM saved in `ctx.prm` (prm/loading.py: a Q-head model or PRIME's implicit PRM)
    uniform   seeded uniform scores (search/uniform.py): the control that says how much of a gain is the critic's
    logpi     the policy's own log π (search/policy.py; `ctx.policy`, the sampling agent or a policy folder)
    oracle    Q^π of the greedy policy in `ctx.policy` (a folder) by Monte-Carlo continuations on `ctx.tasks`
              (rollout/oracle.py); `ctx.options`: mode, gamma, max_steps, num_envs, workers. Close it when done.
    layout    ALFWorld's layout prior alone (search/layout.py; `ctx.options`: prior, a `agentprm tasks layout` file,
              and weight); to add it to another critic, wrap that one in `LayoutCritic`

A critic of your own is one file:

    from agentprm.search.critics import register_critic

    @register_critic("shortest")
    def shortest(ctx):
        return ShortestReplyCritic()          # any object with score(states, replies) -> 1-D float tensor

and is then chosen by name wherever a critic is (`make_critic("shortest", ctx)`, `agentprm eval --prm shortest`
once your module is imported). A package registers without touching agentprm through an entry point of the group
`agentprm.critics` whose object is the module that registers it (imported the first time the name is asked for).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agentprm.agent.critic import Critic
from agentprm.errors import UserError
from agentprm.prm.loading import load_prm
from agentprm.registry import Registry

ENTRY_POINTS = "agentprm.critics"


@dataclass(frozen=True)
class CriticContext:
    """What a critic may be built from."""
    seed: int = 0
    prm: str | Path | None = None      # prm: the PRM folder
    policy: Any = None                 # logpi: the sampling LMAgent or a policy folder; oracle: the policy folder
    tasks: Sequence | None = None      # oracle: the games its continuations replay
    options: Mapping[str, Any] = field(default_factory=dict)   # what one factory alone reads (oracle, layout)


CRITICS: Registry[Callable[[CriticContext], Critic]] = Registry("critic", group=ENTRY_POINTS)


def register_critic(name: str):
    """Decorator adding `make(ctx: CriticContext) -> Critic` under `name`; a taken name is refused."""
    def add(make: Callable[[CriticContext], Critic]) -> Callable[[CriticContext], Critic]:
        CRITICS.add(name, make)
        return make
    return add


def make_critic(name: str, ctx: CriticContext) -> Critic:
    """The critic registered as `name`, built from `ctx`; an unknown name is a one-line error listing the known."""
    return CRITICS.entry(name)(ctx)


def _needs(ctx: CriticContext, name: str, *fields: str) -> None:
    missing = [f for f in fields if getattr(ctx, f) is None]
    if missing:
        raise UserError(f"critic {name!r} needs {' and '.join(missing)} (CriticContext.{missing[0]})")


@register_critic("prm")
def _prm(ctx: CriticContext) -> Critic:
    _needs(ctx, "prm", "prm")
    return load_prm(ctx.prm)


@register_critic("uniform")
def _uniform(ctx: CriticContext) -> Critic:
    from agentprm.search.uniform import UniformCritic

    return UniformCritic(ctx.seed)


@register_critic("logpi")
def _logpi(ctx: CriticContext) -> Critic:
    from agentprm.search.policy import PolicyCritic

    _needs(ctx, "logpi", "policy")
    return PolicyCritic(ctx.policy)


@register_critic("oracle")
def _oracle(ctx: CriticContext) -> Critic:
    from agentprm.rollout.oracle import OracleCritic

    _needs(ctx, "oracle", "policy", "tasks")
    o = dict(ctx.options)
    missing = [k for k in ("mode", "gamma", "max_steps") if k not in o]
    if missing:
        raise UserError(f"critic 'oracle' needs options {', '.join(missing)}")
    return OracleCritic.greedy(ctx.policy, ctx.tasks, mode=o["mode"], gamma=o["gamma"], max_steps=o["max_steps"],
                               num_envs=o.get("num_envs", 16), workers=o.get("workers"), seed=ctx.seed)


@register_critic("layout")
def _layout(ctx: CriticContext) -> Critic:
    from agentprm.search.layout import LayoutCritic, LayoutPrior

    if "prior" not in ctx.options or "weight" not in ctx.options:
        raise UserError("critic 'layout' needs options prior (a layout file) and weight")
    return LayoutCritic(None, LayoutPrior.load(ctx.options["prior"]), float(ctx.options["weight"]))
