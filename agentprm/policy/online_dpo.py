"""Stage 3 — policy update by online DPO against the PRM (AgentPRM §3.1, docs/algorithms.md §1).

For a batch of states s drawn from π_{i-1}'s rollouts, draw `samples_per_state` replies from the *current*
policy π_θ, score them with Q_i, and take the best-scored reply as y_w and the worst as y_l:

    L_DPO = −log σ( β [ (log π_θ(y_w|s) − log π_ref(y_w|s)) − (log π_θ(y_l|s) − log π_ref(y_l|s)) ] ),  π_ref = π_{i-1}

The KL anchor to the *previous* policy (conservative policy iteration) is what keeps Q_i valid for π_i; β is the
paper's 0.03 by default. A state whose samples tie under Q_i gives no pair and no gradient. The loss plugs into
the shared training core: sampling happens inside the loss, so every step is on-policy.
"""
from __future__ import annotations

import copy
import random
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.critic import Critic
from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.lm import LMAgent
from agentprm.agent.scoring import reply_logprobs
from agentprm.errors import UserError
from agentprm.train.core import train

if TYPE_CHECKING:
    from agentprm.policy.config import PolicyUpdateConfig


def dpo_loss(pi_w: torch.Tensor, pi_l: torch.Tensor, ref_w: torch.Tensor, ref_l: torch.Tensor,
             beta: float) -> torch.Tensor:
    """Per-pair DPO loss from sequence log-probs (policy and reference, chosen and rejected)."""
    return -F.logsigmoid(beta * ((pi_w - ref_w) - (pi_l - ref_l)))


def preference_pairs(prm: Critic, states: Sequence, samples: Sequence[Sequence[str]],
                     min_margin: float) -> tuple[list[tuple[int, str, str]], list[float], torch.Tensor]:
    """The update's DPO pairs: per state, its distinct sampled replies scored by the critic, the best y_w and the
    worst y_l — a pair (state index, y_w, y_l) where they differ by more than `min_margin`. Returns the pairs,
    their margins and every score."""
    flat = [(i, r) for i, replies in enumerate(samples) for r in dict.fromkeys(replies)]
    q = prm.score([states[i] for i, _ in flat], [r for _, r in flat]).float()
    pairs, margins = [], []
    for i in range(len(states)):
        idx = [k for k, (j, _) in enumerate(flat) if j == i]
        best, worst = max(idx, key=lambda k: q[k]), min(idx, key=lambda k: q[k])
        if q[best] - q[worst] > min_margin:
            pairs.append((i, flat[best][1], flat[worst][1]))
            margins.append(float(q[best] - q[worst]))
    return pairs, margins, q


class OnlineDPOLoss:
    """`loss_fn(model, states)` for the training core: sample, rank by the PRM, DPO against the frozen reference."""

    def __init__(self, policy: LMAgent, reference, prm: Critic, cfg: PolicyUpdateConfig):
        self.policy, self.reference, self.prm, self.cfg = policy, reference, prm, cfg

    def __call__(self, model, states: Sequence) -> tuple[torch.Tensor, dict]:
        cfg, tok = self.cfg, self.policy.tokenizer
        with torch.no_grad():
            samples = self.policy.sample(states, [None] * len(states), cfg.samples_per_state)
            pairs, margins, q = preference_pairs(self.prm, states, samples, cfg.min_margin)
        metrics = {"prm_mean": float(q.mean()), "pair_frac": len(pairs) / len(states),
                   "prm_margin": sum(margins) / len(margins) if margins else 0.0}
        if not pairs:
            return sum(p.sum() for p in model.parameters()) * 0.0, {**metrics, "reward_acc": 0.0}
        prompts = [prompt_ids(tok, states[i], self.policy.prompt_cfg) for i, _, _ in pairs]
        prompts = prompts + prompts
        replies = [reply_ids(tok, w) for _, w, _ in pairs] + [reply_ids(tok, l) for _, _, l in pairs]
        pi = reply_logprobs(model, prompts, replies, tok.pad_token_id)
        with torch.no_grad():
            ref = reply_logprobs(self.reference, prompts, replies, tok.pad_token_id)
        n = len(pairs)
        losses = dpo_loss(pi[:n], pi[n:], ref[:n], ref[n:], cfg.beta)
        reward_acc = float(((pi[:n] - ref[:n]) > (pi[n:] - ref[n:])).float().mean())
        return losses.mean(), {**metrics, "reward_acc": reward_acc}


class SteeredSampler:
    """Steered exploration (arXiv 2502.10325 §5): `sample` like the agent's, with each state prompted by the
    steered variant (format.steered_messages) with probability `frac`, drawn from `random.Random(seed)`.
    `steered` counts the states that were."""

    def __init__(self, agent: LMAgent, frac: float, seed: int):
        if not 0.0 <= frac <= 1.0:
            raise UserError(f"exploration.steer_frac {frac}: must be in [0, 1]")
        self.agent, self.frac, self._rng, self.steered = agent, frac, random.Random(seed), 0
        self.tokenizer, self.prompt_cfg, self.name = agent.tokenizer, agent.prompt_cfg, agent.name  # what DPO reads

    def sample(self, states: Sequence, turns: Sequence, n: int) -> list[list[str]]:
        steer = [self._rng.random() < self.frac for _ in states]
        self.steered += sum(steer)
        return self.agent.sample(states, turns, n, steered=steer)


def train_online_dpo(policy: LMAgent, prm, states: Sequence, cfg: PolicyUpdateConfig, seed: int = 0,
                     progress: bool = True, on_log=None, steer_frac: float = 0.0) -> tuple[list[dict], int]:
    """Update `policy`'s model in place; the reference is a frozen copy of it taken now (π_{i-1}). Returns the
    logged metrics and how many sampled states got the steered prompt (`steer_frac` of them, in expectation)."""
    model = policy.backend.model
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    sampler = SteeredSampler(LMAgent(model, policy.tokenizer, policy.prompt_cfg, mode=policy.mode,
                                     temperature=cfg.temperature, seed=seed, name=policy.name,
                                     distinct=cfg.distinct),
                             steer_frac, seed)
    loss = OnlineDPOLoss(sampler, reference, prm, cfg)
    history = train(model, list(states), loss, cfg.train_config(len(states), seed), description="online-dpo",
                    progress=progress, on_log=on_log)
    return history, sampler.steered


def rollout_states(rollouts) -> list:
    """The distinct states (by `AgentState.key()`) of stored rollouts: stage 3's state distribution ρ."""
    from agentprm.agent.replay import episode_states
    from agentprm.data.trajectories import iter_episodes, read_trajectories

    states: dict[str, object] = {}
    for episode in iter_episodes(read_trajectories(rollouts)):
        for state, _ in episode_states(episode):
            states.setdefault(state.key(), state)
    return list(states.values())
