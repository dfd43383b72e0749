"""Stage 3, choose mode — the exact KL-regularised policy improvement over the admissible set, distilled.

In choose mode π(a|s) is a softmax over the admissible commands' sequence log-probs, so the solution of

    max_π  E_{a~π}[Q_i(s, a)] − β KL(π(·|s) ‖ π_ref(·|s)),   π_ref = π_{i-1},

is known in closed form: π*(a|s) ∝ π_ref(a|s) · exp(Q_i(s, a) / β). Online DPO (policy/online_dpo.py) reaches
it through sampled pairs, and at T 0.7 two samples of π agree at most states (no pair, no gradient); here every
state teaches the whole target distribution. To bound the critic's cost (an oracle critic plays a continuation per
command), only the `candidates` commands most likely under π_ref are re-weighted (0 = all of them); the others keep
π_ref's probability, and the candidates keep their total mass:

    π*(a|s) = π_ref(a|s)                                                  a ∉ C(s)
    π*(a|s) = π_ref(C|s) · π_ref(a|s) e^{Q(s,a)/β} / Σ_{b∈C} π_ref(b|s) e^{Q(s,b)/β}     a ∈ C(s)

and π_θ is fitted to π* by the cross-entropy −Σ_a π*(a|s) log π_θ(a|s) (= KL(π* ‖ π_θ) + const) on fresh batches of
π_{i-1}'s rollout states, through the shared training core.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.critic import Critic
from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.scoring import _pack, _score_rows, score_candidates
from agentprm.errors import UserError
from agentprm.train.core import train

if TYPE_CHECKING:
    from agentprm.policy.config import PolicyUpdateConfig


def tilted_target(ref_logp: torch.Tensor, q: torch.Tensor, chosen: torch.Tensor, beta: float) -> torch.Tensor:
    """π* over one state's admissible commands (see the module doc): `ref_logp` are π_ref's log-probs (normalised),
    `q` the critic's values for the `chosen` indices."""
    target = ref_logp.exp().clone()
    mass = target[chosen].sum()
    tilted = F.softmax(ref_logp[chosen] + q / beta, -1)
    target[chosen] = mass * tilted
    return target


class KLDistillLoss:
    """`loss_fn(model, states)` for the training core."""

    def __init__(self, tokenizer, prompt_cfg, reference, critic: Critic, cfg: PolicyUpdateConfig):
        self.tok, self.prompt_cfg, self.reference, self.critic, self.cfg = tokenizer, prompt_cfg, reference, critic, cfg
        self._ids: dict[str, list[int]] = {}

    def _reply(self, command: str) -> list[int]:
        if command not in self._ids:
            self._ids[command] = reply_ids(self.tok, format_reply(command))
        return self._ids[command]

    def __call__(self, model, states: Sequence) -> tuple[torch.Tensor, dict]:
        cfg, pad = self.cfg, self.tok.pad_token_id
        prompts = [prompt_ids(self.tok, s, self.prompt_cfg) for s in states]
        cands = [[self._reply(c) for c in s.admissible] for s in states]
        with torch.no_grad():
            ref = [F.log_softmax(x.float(), -1) for x in score_candidates(self.reference, prompts, cands, pad)]
            chosen = [r.topk(min(cfg.candidates or len(r), len(r))).indices for r in ref]
            flat = [(s, s.admissible[int(k)]) for s, idx in zip(states, chosen) for k in idx]
            q = self.critic.score([s for s, _ in flat], [a for _, a in flat]).float()
        q_per = torch.split(q, [len(idx) for idx in chosen])
        targets = [tilted_target(r, qs, idx, cfg.beta) for r, qs, idx in zip(ref, q_per, chosen)]
        logits = _score_rows(model, [_pack(p, c) for p, c in zip(prompts, cands)], pad)   # with gradients
        logp = [F.log_softmax(x.float(), -1) for x in logits]
        loss = torch.stack([-(t * lp).sum() for t, lp in zip(targets, logp)]).mean()
        with torch.no_grad():
            kl_ref = torch.stack([(t * (t.clamp_min(1e-12).log() - r)).sum() for t, r in zip(targets, ref)]).mean()
            moved = sum(int(t.argmax() != r.argmax()) for t, r in zip(targets, ref)) / len(states)
            fit = sum(int(lp.argmax() == t.argmax()) for lp, t in zip(logp, targets)) / len(states)
        return loss, {"prm_mean": float(q.mean()), "target_kl": float(kl_ref), "argmax_moved": moved,
                      "argmax_fit": fit}


def train_kl_distill(policy, critic: Critic, states: Sequence, cfg: PolicyUpdateConfig, seed: int = 0,
                     progress: bool = True) -> list[dict]:
    """Update `policy.backend.model` (an `LMAgent` in choose mode) in place; the reference is a frozen copy taken
    now (π_{i-1}). Returns the logged metrics."""
    if policy.mode != "choose":
        raise UserError("policy.method kl-distill needs decoding mode 'choose' (it re-weights the admissible set)")
    if cfg.beta <= 0:
        raise UserError(f"policy.beta must be > 0 for kl-distill (got {cfg.beta})")
    model = policy.backend.model
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    loss = KLDistillLoss(policy.tokenizer, policy.prompt_cfg, reference, critic, cfg)
    states = [s for s in states if len(s.admissible) > 1]   # nothing to re-weight at a forced move
    return train(model, list(states), loss, cfg.train_config(len(states), seed), description="kl-distill",
                 progress=progress)
