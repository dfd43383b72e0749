"""Stage 3: the registry of policy updates against a critic, and `run_update`, the one way every caller (the loop,
`agentprm train-policy`, the oracle scripts) runs the update a `policy` section names (`PolicyUpdateConfig.method`;
docs/algorithms.md §1, §6).

An update is one function with one signature, registered by name:

    @register_update("my-update")
    def my_update(policy, critic, states, cfg: PolicyUpdateConfig, ctx: UpdateContext) -> tuple[list[dict], dict]:
        ...   # train `policy` (an LMAgent) in place; return the logged history and the update's own numbers

`run_update` wraps what it returns in an `UpdateResult`, the typed record a saved π_i keeps in its agentprm.json and
the loop's report and plots read back (`UpdateResult.read`) without knowing which update made it. The entry's flags
say which loop settings apply to it; loop/config.py refuses the others at load time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from agentprm.agent.critic import Critic
from agentprm.policy.config import PolicyUpdateConfig
from agentprm.registry import Registry

POLICY_GRADIENT = "policy-gradient"   # GRPO, SPRO, GiGPO (loop/algos/grpo.py): recorded like an update, run by the loop


@dataclass
class UpdateContext:
    """What an update may use besides the policy, the critic, the states and its config section."""
    seed: int
    reference: str                    # π_{i-1}'s folder (the frozen reference is a copy of `policy` taken at the start)
    progress: bool = True
    on_log: Callable | None = None    # called with each logged step (the hacking detector): `watchable` updates only
    steer_frac: float = 0.0           # share of generations with the steered prompt: `watchable` updates only
    tasks: Sequence = ()              # the games a `searches` update plays (beam-distill)
    max_steps: int = 30
    workers: int = 2


def logged(check: dict) -> dict:
    """A reward-hacking check's values (policy/hacking.py) as the `hack_*` keys of the training core's logged row
    (what the report plots)."""
    return {f"hack_{k}": v for k, v in check.items() if k != "step"}


@dataclass
class UpdateResult:
    """A stage-3 update's record: which update, its config, seed and reference, the logged history and its own
    numbers (`details`: steered states, what was distilled, the hacking checks, the LoRA size, an oracle's price)."""
    method: str
    history: list[dict]
    config: dict = field(default_factory=dict)
    seed: int = 0
    reference: str = ""
    details: dict = field(default_factory=dict)

    @staticmethod
    def key(method: str) -> str:
        """The key of a saved policy's agentprm.json the record is stored under (online-dpo -> online_dpo)."""
        return method.replace("-", "_")

    def record(self) -> dict:
        """The record as one JSON object: what a saved policy keeps and `train-policy --json` prints."""
        return {"config": self.config, "seed": self.seed, "reference": self.reference, "history": self.history,
                **self.details}

    def meta(self) -> dict[str, dict]:
        """The record as `save_policy(..., **result.meta())` stores it, under its method's key."""
        return {self.key(self.method): self.record()}

    def logged_history(self) -> list[dict]:
        """The history the report and the viewer plot: the logged rows, after the hacking detector's step-0 check
        (π_{i-1} itself, checked before the first step) when the update was monitored."""
        checks = (self.details.get("hacking") or {}).get("checks", [])
        return ([{"step": 0, **logged(checks[0])}] if checks else []) + self.history

    @classmethod
    def read(cls, meta: dict) -> UpdateResult | None:
        """The record in a saved policy's agentprm.json, whichever update made it; None for a policy no update
        made (π0, or one trained by SFT)."""
        for method in (*UPDATES, POLICY_GRADIENT):
            record = meta.get(cls.key(method))
            if isinstance(record, dict):
                record = dict(record)
                core = {name: record.pop(name) for name in ("config", "seed", "reference") if name in record}
                return cls(method, record.pop("history", []), details=record, **core)
        return None


@dataclass(frozen=True)
class Update:
    name: str
    run: Callable[[Any, Critic, Sequence, PolicyUpdateConfig, UpdateContext], tuple[list[dict], dict]]
    watchable: bool = False     # online DPO: steered generations and the hacking detector's on_log apply
    choose_only: bool = False   # scores every admissible command of a state: rollout.mode choose
    searches: bool = False      # plays the train tasks itself (`UpdateContext.tasks`): policy.search_* apply


UPDATES: Registry[Update] = Registry("policy update")


def register_update(name: str, *, watchable: bool = False, choose_only: bool = False, searches: bool = False):
    """Decorator adding an update under `name`; a name already taken is refused."""
    if name == POLICY_GRADIENT:
        raise ValueError(f"policy update {name!r} is the policy-gradient algorithms' record; choose another name")

    def add(fn: Callable) -> Callable:
        UPDATES.add(name, Update(name, fn, watchable, choose_only, searches))
        return fn
    return add


def get_update(name: str) -> Update:
    return UPDATES.entry(name)


def run_update(policy, critic: Critic, states: Sequence, p: PolicyUpdateConfig, ctx: UpdateContext) -> UpdateResult:
    """Update `policy` in place by `p.method` against `critic` on `states` (with `p.lora`, its model is first wrapped
    with LoRA adapters: save it with `merge=p.lora.merge`)."""
    update, details = get_update(p.method), {}
    if p.lora.r:   # adapters on π_{i-1}; they start at zero, so every update's frozen copy is π_{i-1} exactly
        from agentprm.models.lora import add_lora, trainable   # peft: imported only when adapters are asked for

        policy.backend.model = add_lora(policy.backend.model, p.lora, seed=ctx.seed)
        details["lora"] = trainable(policy.backend.model)
    history, own = update.run(policy, critic, states, p, ctx)
    return UpdateResult(p.method, history, p.to_dict(), ctx.seed, ctx.reference, {**details, **own})


# The built-in updates. Their training code imports torch, so it is imported when an update runs, not when a config
# or `--help` loads this registry.
@register_update("online-dpo", watchable=True)
def online_dpo(policy, critic, states, p, ctx):
    from agentprm.policy.online_dpo import train_online_dpo

    history, steered = train_online_dpo(policy, critic, states, p, ctx.seed, progress=ctx.progress,
                                        on_log=ctx.on_log, steer_frac=ctx.steer_frac)
    return history, {"steer_frac": ctx.steer_frac, "steered_states": steered}


@register_update("kl-distill", choose_only=True)
def kl_distill(policy, critic, states, p, ctx):
    from agentprm.policy.kl_distill import train_kl_distill

    return train_kl_distill(policy, critic, states, p, ctx.seed, progress=ctx.progress), {}


@register_update("beam-distill", searches=True)
def beam_distill(policy, critic, states, p, ctx):
    """Searches `ctx.tasks` with (π_{i-1}, critic), then distils the won episodes; `states` are not used."""
    from agentprm.agent.lm import LMAgent
    from agentprm.policy.beam_distill import search_episodes, train_beam_distill

    # samples π_{i-1}: the search runs before the model is trained
    sampler = LMAgent(policy.backend, policy.tokenizer, policy.prompt_cfg, mode=policy.mode,
                      temperature=p.temperature, seed=ctx.seed, name=policy.name, distinct=p.distinct)
    episodes, _ = search_episodes(sampler, critic, ctx.tasks, p, max_steps=ctx.max_steps, seed=ctx.seed,
                                  workers=ctx.workers)
    return train_beam_distill(policy, episodes, p, ctx.seed, progress=ctx.progress)
