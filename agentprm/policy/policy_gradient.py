"""Group policy gradient over stored episodes: GRPO (outcome-only), SPRO and GiGPO (docs/algorithms.md §4).

The G episodes π_{i-1} played on one task form a group. Each turn's (state, reply) is one action; its advantage
comes from `advantages.spro_advantages` (per-turn granularity): the group-normalised outcome plus, for β > 0, the
Masked Step Advantage of the cumulative process reward β Σ_{j≤t} log(π_θ/π_ref). β = 0 is GRPO exactly. GiGPO's
advantages (`advantages.gigpo_advantages`: the outcome's plus ω times the anchor-state step advantage) depend on no
model, so they are computed once, when the groups are encoded.

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
from agentprm.data.trajectories import EpisodeRecord, StepRecord
from agentprm.policy.advantages import gigpo_advantages, pad_steps, spro_advantages
from agentprm.targets.mc import returns_to_go
from agentprm.policy.config import PolicyGradientConfig
from agentprm.train.core import train


Group = list[EncodedEpisode]


def anchor_state(step: StepRecord) -> str:
    """GiGPO's anchor key: the state a step stands in as the agent sees it, its observation and admissible commands
    (the observation alone would merge, e.g., every "Nothing happens." of a group; the commands also say what is held
    and where). verl-agent keys by the observation; here both, since ALFWorld's observations repeat across states."""
    return step.observation + "\x00" + "\x00".join(sorted(step.admissible))


def encode_groups(episodes: Iterable[EpisodeRecord], tokenizer, prompt_cfg: PromptConfig,
                  gigpo: PolicyGradientConfig | None = None) -> list[Group]:
    """Episodes grouped by task; failed-env or empty episodes and groups of one dropped. With `gigpo` (its ω, γ and
    normalisation), each episode also gets its fixed GiGPO advantage per turn."""
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for episode in episodes:
        if not episode.error and episode.steps:
            by_task[episode.task_id].append(episode)
    groups = []
    for _, records in sorted(by_task.items()):
        if len(records) < 2:
            continue
        group = [encode_episode(e, tokenizer, prompt_cfg) for e in records]
        if gigpo is not None:
            returns, mask = pad_steps([returns_to_go([s.reward for s in e.steps], gigpo.gigpo_gamma).tolist() for e in records])
            adv = gigpo_advantages(torch.tensor([float(e.won) for e in records]), returns, mask,
                                   [[anchor_state(s) for s in e.steps] for e in records], gigpo.gigpo_omega,
                                   gigpo.gigpo_std_norm)
            for k, ep in enumerate(group):
                ep.advantages = adv[k, :len(ep.prompts)]
        groups.append(group)
    return groups


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
            if group[0].advantages is not None:   # GiGPO's, fixed at encoding
                adv, _ = pad_steps([ep.advantages.tolist() for ep in group])
            else:
                adv = spro_advantages(torch.tensor([ep.outcome for ep in group]), log_ratio, mask, self.process_beta)
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
                          on_log=None, gigpo: bool = False) -> list[dict]:
    """Update `model` (π_{i-1} on entry) in place on π_{i-1}'s episodes; `process_beta` = SPRO's β (0: GRPO);
    `gigpo`: GiGPO's advantages instead (cfg's gigpo_* settings). π_ref = π_old enter only through their log-probs of
    the stored replies, computed here before the first step, so no frozen copy is kept."""
    if gigpo and process_beta:
        raise ValueError("GiGPO's advantages have no process reward: process_beta must be 0")
    groups = encode_groups(episodes, tokenizer, prompt_cfg, cfg if gigpo else None)
    if not groups:
        return []
    add_reference_logprobs([ep for g in groups for ep in g], model.eval(), tokenizer.pad_token_id)
    return train(model, groups, PolicyGradientLoss(cfg, tokenizer.pad_token_id, process_beta),
                 cfg.train_config(len(groups), seed),
                 description="gigpo" if gigpo else "spro" if process_beta else "grpo",
                 progress=progress, on_log=on_log)
