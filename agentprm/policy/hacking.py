"""Reward-hacking detector for stage 3 (online DPO against Q_i; docs/algorithms.md §1, the paper's Fig. 3).

With few rollouts the policy can keep climbing Q_i while its true success falls. `HackingDetector` is the
training core's `on_log` callback: before the update and then every `check_every` policy steps it measures, on a
fixed set of monitor states (held out of the update), with no outcome label of the policy being trained:

    prm       mean Q_i of π_θ's greedy replies. Rising = π_θ finds what Q_i likes: progress or hacking.
    ens_std   std of Q across a PRM ensemble (Q_i and PRMs fitted to the same targets with other seeds/task
              splits) on π_θ's greedy and sampled replies, averaged. Rising = π_θ moves where the targets do
              not pin Q down, so Q_i's preference there is an extrapolation.
    kl        mean log π_θ(a|s) − log π_{i-1}(a|s) over replies a sampled from π_θ: a Monte-Carlo estimate of
              KL(π_θ‖π_{i-1}), how far π_θ left the policy whose rollouts Q_i was fitted on.
    spearman  optional probe: Spearman(Q_i(s,a), return-to-go) over a few fresh greedy episodes of π_θ (a probe's
              returns, never the training data's); `probe_success` is their success rate, for the record.

Alarm (a heuristic — docs/reward-hacking.md): `prm` rose more than `prm_rise` *and* `ens_std` rose more than
`std_rise` since the check before training; or `spearman` < `min_spearman`; or `kl` > `max_kl` (when > 0). The
first alarm emits a `HackingWarning`; every check's result is added to the core's logged row (`hack_*` keys) and
kept in `checks`; with `stop_on_alarm` the callback returns True, which stops the core's loop after that step.
"""
from __future__ import annotations

import copy
import random
import warnings
from typing import Callable, NamedTuple, Sequence

import torch

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.agent.scoring import reply_logprobs
from agentprm.agent.state import AgentState
from agentprm.targets.mc import returns_to_go
from agentprm.policy.config import HackingConfig
from agentprm.policy.update import logged
from agentprm.prm.metrics import spearman
from agentprm.rollout.play import play_tasks


class HackingWarning(UserWarning):
    pass


class ProbeResult(NamedTuple):
    """Every (state, reply, return-to-go) of the probe's episodes, and their success rate."""
    states: list[AgentState]
    replies: list[str]
    returns: list[float]
    success: float


Probe = Callable[[LMAgent], ProbeResult]


def hold_out(states: Sequence[AgentState], n: int, seed: int) -> tuple[list[AgentState], list[AgentState]]:
    """A seeded `n` of `states` to monitor, and the rest (for the update: monitor states must stay unseen by it)."""
    order = list(range(len(states)))
    random.Random(seed).shuffle(order)
    return [states[k] for k in order[:n]], [states[k] for k in order[n:]]


def episode_probe(tasks: Sequence, per_task: int, seed: int, max_steps: int, gamma: float,
                  num_envs: int = 8, workers: int | None = None) -> Probe:
    """A probe that plays the agent on `tasks` (`per_task` episodes each, the same seeds at every check, so only
    the policy changes between checks)."""
    def probe(agent: LMAgent) -> ProbeResult:
        episodes, summary = play_tasks(agent, tasks, per_task=per_task, seed=seed, max_steps=max_steps,
                                       tag="hacking-probe", num_envs=num_envs, workers=workers, progress=False)
        states, replies, returns = [], [], []
        for episode in episodes:
            if episode.error:
                continue
            returns += returns_to_go([s.reward for s in episode.steps], gamma).tolist()
            for state, reply in episode_states(episode):
                states.append(state)
                replies.append(reply)
        return ProbeResult(states, replies, returns, summary["success_rate"])
    return probe


class HackingDetector:
    """`on_log(step, row)` for `train_online_dpo`. `ensemble`: the other PRMs (Q_i itself is `prm`); `states`:
    the monitor states; `temperature`: the update's sampling temperature. Takes its own frozen copy of the policy's
    model now, as π_{i-1}, and runs the baseline check (step 0)."""

    def __init__(self, policy: LMAgent, prm, ensemble: Sequence, states: Sequence[AgentState],
                 cfg: HackingConfig, probe: Probe | None = None, seed: int = 0, temperature: float = 1.0):
        if not states:
            raise ValueError("the hacking detector needs at least one monitor state")
        model = policy.backend.model
        self.model, self.tokenizer, self.prompt_cfg = model, policy.tokenizer, policy.prompt_cfg
        self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.greedy = LMAgent(model, policy.tokenizer, policy.prompt_cfg, mode=policy.mode, name=policy.name)
        self.prms, self.states, self.cfg, self.probe, self.seed = [prm, *ensemble], list(states), cfg, probe, seed
        self.temperature = temperature
        self.checks: list[dict] = []
        self.alarm_step: int | None = None
        self.check(0)

    def __call__(self, step: int, row: dict) -> bool:
        if step - self.checks[-1]["step"] < self.cfg.check_every:
            return False
        check = self.check(step)
        row.update(logged(check))
        return check["alarm"] and self.cfg.stop_on_alarm

    def check(self, step: int) -> dict:
        was_training = self.model.training
        self.model.eval()
        try:
            signals = self.signals()
        finally:
            self.model.train(was_training)
        reasons = self.reasons(signals, self.checks[0]) if self.checks else []
        check = {"step": step, **signals, "alarm": bool(reasons), "reasons": reasons}
        self.checks.append(check)
        if reasons and self.alarm_step is None:
            self.alarm_step = step
            warnings.warn(HackingWarning(f"possible reward hacking at policy step {step}: {'; '.join(reasons)}"),
                          stacklevel=2)
        return check

    def signals(self) -> dict:
        n, k = len(self.states), self.cfg.samples_per_state
        greedy = [r[0] for r in self.greedy.sample(self.states, [None] * n, 1)]
        # the same sampling seed at every check, so the samples change only where the policy did
        sampler = LMAgent(self.model, self.tokenizer, self.prompt_cfg, mode=self.greedy.mode,
                          temperature=self.temperature, seed=self.seed)
        sampled = [(s, r) for s, rs in zip(self.states, sampler.sample(self.states, [None] * n, k)) for r in rs]
        states, replies = self.states + [s for s, _ in sampled], greedy + [r for _, r in sampled]
        q = torch.stack([torch.as_tensor(p.score(states, replies)).float() for p in self.prms])  # (PRMs, replies)
        out = {"prm": float(q[0, :n].mean()),
               "ens_std": float(q.std(0, unbiased=False).mean()) if len(self.prms) > 1 else None,
               "kl": self.kl([s for s, _ in sampled], [r for _, r in sampled])}
        if self.probe is not None:
            probe = self.probe(self.greedy)
            q_probe = self.prms[0].score(probe.states, probe.replies).tolist() if probe.states else []
            out.update(spearman=spearman(q_probe, probe.returns), probe_success=probe.success)
        return out

    @torch.no_grad()
    def kl(self, states: Sequence[AgentState], replies: Sequence[str]) -> float:
        prompts = [prompt_ids(self.tokenizer, s, self.prompt_cfg) for s in states]
        ids = [reply_ids(self.tokenizer, r) for r in replies]
        pad = self.tokenizer.pad_token_id
        log_ratio = reply_logprobs(self.model, prompts, ids, pad) - reply_logprobs(self.reference, prompts, ids, pad)
        return float(log_ratio.mean())

    def reasons(self, now: dict, base: dict) -> list[str]:
        c, out = self.cfg, []
        rise = now["prm"] - base["prm"]
        if now["ens_std"] is not None and rise > c.prm_rise and now["ens_std"] - base["ens_std"] > c.std_rise:
            out.append(f"PRM score +{rise:.3f} with ensemble std +{now['ens_std'] - base['ens_std']:.3f}")
        if now.get("spearman") is not None and now["spearman"] < c.min_spearman:
            out.append(f"probe Spearman {now['spearman']:.3f} < {c.min_spearman}")
        if c.max_kl > 0 and now["kl"] > c.max_kl:
            out.append(f"KL proxy {now['kl']:.3f} > {c.max_kl}")
        return out

    def summary(self) -> dict:
        """What goes into the policy's agentprm.json."""
        return {"config": self.cfg.to_dict(), "temperature": self.temperature, "ensemble_size": len(self.prms), "monitor_states": len(self.states),
                "checks": self.checks, "alarm_step": self.alarm_step}
