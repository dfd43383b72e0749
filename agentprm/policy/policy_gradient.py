"""Group policy gradient over stored episodes: GRPO (outcome-only) and SPRO (docs/algorithms.md §4).

The G episodes π_{i-1} played on one task form a group. Each turn's (state, reply) is one action; its advantage
comes from `advantages.spro_advantages` (per-turn granularity): the group-normalised outcome plus, for β > 0, the
Masked Step Advantage of the cumulative process reward β Σ_{j≤t} log(π_θ/π_ref). β = 0 is GRPO exactly.

Per turn, with ρ = π_θ(reply|s) / π_old(reply|s) (sequence probabilities) and A the turn's advantage:

    L = − mean_turns min(ρ A, clip(ρ, 1 − ε, 1 + ε) A) − c_H · Ĥ

π_old = π_ref = π_{i-1}: the episodes were sampled from π_{i-1}, and π_{i-1} (frozen) is the reference, so
the process reward is 0 on the first step and then measures how far π_θ has moved on each turn (recomputed from
the current model every step, detached). Ĥ = mean −log π_θ(reply|s) over the batch's stored replies, a
sequence-level sample estimate of the entropy (reply_logprobs returns sums, not full distributions).

A training example is a whole group (the masked mean needs every episode of the task at once); the loss plugs
into the shared training core. Groups with fewer than two usable episodes carry no signal and are dropped.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

import torch

from agentprm.agent.encoding import PromptConfig
from agentprm.agent.episodes import EncodedEpisode, add_reference_logprobs, encode_episode
from agentprm.agent.scoring import reply_logprobs
from agentprm.data.trajectories import EpisodeRecord
from agentprm.policy.advantages import pad_steps, spro_advantages
from agentprm.policy.config import PolicyGradientConfig
from agentprm.train.core import train


Group = list[EncodedEpisode]


def encode_groups(episodes: Iterable[EpisodeRecord], tokenizer, prompt_cfg: PromptConfig) -> list[Group]:
    """Episodes grouped by task; failed-env or empty episodes and groups of one dropped."""
    by_task: dict[str, Group] = defaultdict(list)
    for episode in episodes:
        if not episode.error and episode.steps:
            by_task[episode.task_id].append(encode_episode(episode, tokenizer, prompt_cfg))
    return [group for _, group in sorted(by_task.items()) if len(group) >= 2]


class PolicyGradientLoss:
    """`loss_fn(model, groups)` for the training core: the clipped surrogate with per-turn GRPO/SPRO advantages."""

    def __init__(self, cfg: PolicyGradientConfig, pad_id: int, process_beta: float = 0.0):
        self.cfg, self.pad_id, self.process_beta = cfg, pad_id, process_beta

    def __call__(self, model, groups: Sequence[Group]) -> tuple[torch.Tensor, dict]:
        episodes = [ep for g in groups for ep in g]
        logps = reply_logprobs(model, [p for ep in episodes for p in ep.prompts],
                               [r for ep in episodes for r in ep.replies], self.pad_id).cpu()
        per_episode = list(torch.split(logps, [len(ep.prompts) for ep in episodes]))
        surrogate, clipped, advs, k = [], [], [], 0
        for group in groups:
            logp, ref = per_episode[k:k + len(group)], [ep.ref_logps for ep in group]
            k += len(group)
            log_ratio, mask = pad_steps([(lp.detach() - r).tolist() for lp, r in zip(logp, ref)])
            outcomes = torch.tensor([ep.outcome for ep in group])
            adv = spro_advantages(outcomes, log_ratio, mask, self.process_beta)
            for i, (lp, r) in enumerate(zip(logp, ref)):
                a = adv[i, :len(lp)]
                ratio = torch.exp(lp - r)
                surrogate.append(torch.min(ratio * a, ratio.clamp(1 - self.cfg.clip, 1 + self.cfg.clip) * a))
                clipped.append(((ratio - 1).abs() > self.cfg.clip).float().detach())
                advs.append(a)
        surrogate_all, entropy = torch.cat(surrogate), -logps.mean()
        loss = -surrogate_all.mean() - self.cfg.entropy_coef * entropy
        adv_all = torch.cat(advs)
        return loss, {"surrogate": float(surrogate_all.mean().detach()), "entropy": float(entropy.detach()),
                      "clip_frac": float(torch.cat(clipped).mean()), "adv_abs": float(adv_all.abs().mean()),
                      "log_ratio": float((logps.detach() - torch.cat([ep.ref_logps for ep in episodes])).mean())}


def train_policy_gradient(model, tokenizer, prompt_cfg: PromptConfig, episodes: Iterable[EpisodeRecord],
                          cfg: PolicyGradientConfig, process_beta: float = 0.0, seed: int = 0, progress: bool = True,
                          on_log=None) -> list[dict]:
    """Update `model` (π_{i-1} on entry) in place on π_{i-1}'s episodes; `process_beta` = SPRO's β (0: GRPO).
    π_ref = π_old enter only through their log-probs of the stored replies, computed here before the first step, so
    no frozen copy is kept."""
    groups = encode_groups(episodes, tokenizer, prompt_cfg)
    if not groups:
        return []
    add_reference_logprobs([ep for g in groups for ep in g], model.eval(), tokenizer.pad_token_id)
    return train(model, groups, PolicyGradientLoss(cfg, tokenizer.pad_token_id, process_beta),
                 cfg.train_config(len(groups), seed), description="spro" if process_beta else "grpo",
                 progress=progress, on_log=on_log)
