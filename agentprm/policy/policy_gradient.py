"""Group policy gradient over stored episodes: GRPO (outcome-only), SPRO and GiGPO (docs/algorithms.md §4).

The G episodes π_{i-1} played on one task form a group. Each turn's (state, reply) is one action; its advantage
comes from `advantages.spro_advantages` (per-turn granularity): the group-normalised outcome plus, for β > 0, the
Masked Step Advantage of the cumulative process reward β Σ_{j≤t} log(π_θ/π_ref). β = 0 is GRPO exactly. GiGPO's
advantages (`advantages.gigpo_advantages`: the outcome's plus ω times the anchor-state step advantage) depend on no
model, so they are computed once, when the groups are encoded.

Per turn, with ρ = π_θ(reply|s) / π_old(reply|s) (sequence probabilities) and A the turn's advantage:

    L = − mean_turns min(ρ A, clip(ρ, 1 − ε, 1 + ε) A) − c_H · Ĥ

π_old = π_{i-1}, the policy that sampled the episodes. A comes from the advantage estimator the update is given
(policy/advantages.py ADVANTAGES: grpo, rloo, spro, gigpo, or one registered from outside). SPRO's reads the process
reward β Σ log(π_θ/π_ref) (recomputed from the current model every step, detached), π_ref a frozen model: π0 in
SPRO's paper (`reference`), π_old when none is given — then the process reward is 0 on the first step and measures
only how far π_θ has moved since. Ĥ = mean −log π_θ(reply|s) over the batch's stored replies, a sequence-level sample
estimate of the entropy (reply_logprobs returns sums, not full distributions).

A training example is a whole group (the masked mean needs every episode of the task at once); the loss plugs
into the shared training core. Groups with fewer than two usable episodes carry no signal and are dropped.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

import torch

from agentprm.agent.encoding import PromptConfig
from agentprm.agent.episodes import EncodedEpisode, add_reference_logprobs, anchor_state, encode_episode
from agentprm.agent.scoring import reply_logprobs
from agentprm.data.trajectories import EpisodeRecord
from agentprm.policy.advantages import ADVANTAGES, GroupSteps, pad_steps
from agentprm.policy.config import PolicyGradientConfig
from agentprm.train.core import train


Group = list[EncodedEpisode]
__all__ = ["anchor_state", "encode_groups", "PolicyGradientLoss", "train_policy_gradient"]


def encode_groups(episodes: Iterable[EpisodeRecord], tokenizer, prompt_cfg: PromptConfig) -> list[Group]:
    """Episodes grouped by task; failed-env or empty episodes and groups of one dropped."""
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for episode in episodes:
        if not episode.error and episode.steps:
            by_task[episode.task_id].append(episode)
    return [[encode_episode(e, tokenizer, prompt_cfg) for e in records]
            for _, records in sorted(by_task.items()) if len(records) >= 2]


def group_steps(group: Group, logp: Sequence[torch.Tensor] | None) -> GroupSteps:
    """What an estimator sees of a group; `logp`: π_θ's log-probs per episode (None: log_ratios stay 0)."""
    rewards, mask = pad_steps([ep.rewards for ep in group])
    log_ratios = (pad_steps([(lp.detach() - ep.ref_logps).tolist() for lp, ep in zip(logp, group)])[0]
                  if logp is not None else torch.zeros_like(mask))
    return GroupSteps(torch.tensor([ep.outcome for ep in group]), rewards, mask, [ep.anchors for ep in group],
                      log_ratios)


class PolicyGradientLoss:
    """`loss_fn(model, groups)` for the training core: the clipped surrogate with the per-turn advantages of the
    estimator named `advantage` (policy/advantages.py)."""

    def __init__(self, cfg: PolicyGradientConfig, pad_id: int, advantage: str = "grpo"):
        self.cfg, self.pad_id, self.estimator = cfg, pad_id, ADVANTAGES.entry(advantage)

    def __call__(self, model, groups: Sequence[Group]) -> tuple[torch.Tensor, dict]:
        episodes = [ep for g in groups for ep in g]
        logps = reply_logprobs(model, [p for ep in episodes for p in ep.prompts],
                               [r for ep in episodes for r in ep.replies], self.pad_id).cpu()
        per_episode = list(torch.split(logps, [len(ep.prompts) for ep in episodes]))
        surrogate, clipped, advs, k = [], [], [], 0
        for group in groups:
            logp = per_episode[k:k + len(group)]
            k += len(group)
            adv = self.estimator.fn(group_steps(group, logp if self.estimator.uses_reference else None), self.cfg)
            for i, (lp, ep) in enumerate(zip(logp, group)):
                a = adv[i, :len(lp)]
                ratio = torch.exp(lp - old_logps(ep))
                surrogate.append(torch.min(ratio * a, ratio.clamp(1 - self.cfg.clip, 1 + self.cfg.clip) * a))
                clipped.append(((ratio - 1).abs() > self.cfg.clip).float().detach())
                advs.append(a)
        surrogate_all, entropy = torch.cat(surrogate), -logps.mean()
        kl = kl_k3(logps, torch.cat([ep.ref_logps for ep in episodes]))
        loss = -surrogate_all.mean() - self.cfg.entropy_coef * entropy + self.cfg.kl_coef * kl
        adv_all = torch.cat(advs)
        return loss, {"surrogate": float(surrogate_all.mean().detach()), "entropy": float(entropy.detach()),
                      "kl_ref": float(kl.detach()),
                      "clip_frac": float(torch.cat(clipped).mean()), "adv_abs": float(adv_all.abs().mean()),
                      "log_ratio": float((logps.detach() - torch.cat([old_logps(ep) for ep in episodes])).mean())}


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Mean over turns of DeepSeekMath's k3 estimate of KL(π_θ ‖ π_ref) from a sample of π_θ's replies:
    exp(r) − r − 1 with r = log π_ref − log π_θ — never negative, 0 where the two agree, unbiased in expectation."""
    r = ref_logp.to(logp.dtype) - logp
    return (torch.exp(r) - r - 1).mean()


def old_logps(ep: EncodedEpisode) -> torch.Tensor:
    return ep.ref_logps if ep.old_logps is None else ep.old_logps


def train_policy_gradient(model, tokenizer, prompt_cfg: PromptConfig, episodes: Iterable[EpisodeRecord],
                          cfg: PolicyGradientConfig, advantage: str = "grpo", seed: int = 0, progress: bool = True,
                          on_log=None, reference=None) -> list[dict]:
    """Update `model` (π_{i-1} = π_old on entry) in place on π_{i-1}'s episodes with the advantages of the estimator
    named `advantage`. π_old's log-probs of the stored replies are computed here before the first step, and with
    `reference` (a frozen model: SPRO's π0) π_ref's; without it π_ref = π_old, and no frozen copy is kept."""
    groups = encode_groups(episodes, tokenizer, prompt_cfg)
    if not groups:
        return []
    loss = PolicyGradientLoss(cfg, tokenizer.pad_token_id, advantage)   # an unknown estimator: refused before work
    encoded = [ep for g in groups for ep in g]
    add_reference_logprobs(encoded, model.eval(), tokenizer.pad_token_id,
                           "ref_logps" if reference is None else "old_logps")
    if reference is not None:
        add_reference_logprobs(encoded, reference.eval(), tokenizer.pad_token_id)
    return train(model, groups, loss, cfg.train_config(len(groups), seed), description=advantage, progress=progress,
                 on_log=on_log)
