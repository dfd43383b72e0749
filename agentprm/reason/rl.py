"""Token-level process RL on reasoning problems: SPRO as its paper defines it, GRPO, and PRIME, on the same batches.

One RL step: draw `prompts` problems, sample `group` responses to each from the current policy π_θ (which is π_old
for this step), check each final answer (o_i ∈ {0, 1}), drop the groups the accuracy filter rejects, compute every
response token's advantage A_{i,t}, then take `ppo_epochs` gradient steps on the clipped objective. Token t of
response i is the action; its log-ratios are per token.

    GRPO   A_{i,t} = (o_i − mean o) / (std o + ε)                             the group's outcome, at every token
    SPRO   A_{i,t} = (o_i − mean o) / (std o + ε) + MSA_{i,t}                  (arXiv 2507.01551)
           R_{i,t} = Σ_{j≤t} β · log(π_θ(y_{i,j}) / π_ref(y_{i,j}))              cumulative process reward, detached
           MSA_{i,t} = R_{i,t} − mean{R_{k,t} : response k has a token t}      masked step advantage
           π_ref is the *initial* policy, frozen for the whole run — not π_old, which would make R = 0 at the start
           of every step (the agent loop's per-turn SPRO, whose π_ref = π_{i−1}, measured +0.0 over GRPO for that
           reason: docs/results.md). β = 0 is GRPO bit for bit.
    PRIME  (arXiv 2502.01456) an implicit PRM π_φ, a copy of the initial policy, gives token rewards
           r_{i,t} = β · log(π_φ(y_{i,t}) / π_ref(y_{i,t})); φ is trained online on each batch's outcomes with the
           cross-entropy of σ(Σ_t r_{i,t}) against o_i (after scoring the batch). Advantages are RLOO returns:
           r̃_{i,t} = r_{i,t}·G/(G−1) − Σ_k mean_t(r_{k,t})/(G−1) at every token, õ_i = o_i − mean_{k≠i} o_k at the
           last token, A_{i,t} = Σ_{s≥t} (c_p·r̃_{i,s} + c_o·õ_i·1[s = last]), whitened over the batch's tokens.

The objective, with ρ = π_θ(y_{i,t}) / π_old(y_{i,t}) and H_{i,t} the entropy of π_θ's next-token distribution,
averaged over all response tokens of the batch ("token-mean"):

    L = − mean_{i,t} min(ρ A, clip(ρ, 1 − ε, 1 + ε) A) − c_H · mean_{i,t} H_{i,t}

Accuracy filter: a group whose accuracy lies outside [filter_low, filter_high] is dropped before the update (all
right or all wrong gives GRPO and SPRO no outcome signal; PRIME's recipe keeps 0.2..0.8). The log-ratio pieces are
`policy/advantages.py`'s, on a (responses × tokens) layout instead of (episodes × turns).
"""
from __future__ import annotations

import copy
import random
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.encoding import end_of_turn_id
from agentprm.agent.lm import HFBackend
from agentprm.agent.scoring import right_pad
from agentprm.policy.advantages import group_outcome_advantages, spro_advantages
from agentprm.reason.config import ReasonRLConfig
from agentprm.reason.model import HFCompleter, prompt_ids, response_text
from agentprm.reason.problems import Problem
from agentprm.train.checkpoint import active_checkpoints
from agentprm.train.core import fingerprint

# --------------------------------------------------------------------------------------------- token log-probs
def token_logprobs(model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                   entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """log π(y_t | prompt, y_<t) of every response token, as a (B, T) tensor right-padded with its 0/1 mask, and
    (with `entropy`) the entropy of each of those next-token distributions. Gradients flow unless under no_grad."""
    device = next(model.parameters()).device
    rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
    ids, attn = right_pad(rows, pad_id)
    logits = model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits.float()
    width = max((len(r) for r in responses), default=0)
    index = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        index[b, :len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))   # the position that predicts each token
        mask[b, :len(r)] = 1.0
    index, mask = index.to(device), mask.to(device)
    picked = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))    # (B, T, V)
    norm = picked.logsumexp(-1)
    targets, _ = right_pad([list(r) for r in responses], pad_id)
    token_lp = (picked.gather(-1, targets.to(device)[..., None]).squeeze(-1) - norm) * mask
    if not entropy:
        return token_lp, mask, None
    probs = (picked - norm[..., None]).exp()
    return token_lp, mask, (norm - (probs * picked).sum(-1)) * mask      # H = logZ − Σ p·logit


# ------------------------------------------------------------------------------------------------- advantages
def grpo_token_advantages(outcomes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return group_outcome_advantages(outcomes)[:, None] * mask


def spro_token_advantages(outcomes: torch.Tensor, log_ratios: torch.Tensor, mask: torch.Tensor,
                          beta: float) -> torch.Tensor:
    """SPRO on one group's (G, T) token layout: outcome advantage + MSA of the cumulative process reward."""
    return spro_advantages(outcomes, log_ratios, mask, beta)


def prime_token_returns(outcomes: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, outcome_coef: float,
                        process_coef: float) -> torch.Tensor:
    """PRIME's RLOO returns for one group, (G, T), before whitening (module doc)."""
    g = len(outcomes)
    lengths = mask.sum(1).clamp(min=1.0)
    seq_mean = (rewards * mask).sum(1) / lengths
    process = (rewards * g / (g - 1) - seq_mean.sum() / (g - 1)) * mask
    outcome_loo = outcomes - (outcomes.sum() - outcomes) / (g - 1)
    last = F.one_hot((lengths - 1).long(), mask.shape[1]).float() * mask
    per_token = process_coef * process + outcome_coef * outcome_loo[:, None] * last
    return per_token.flip(-1).cumsum(-1).flip(-1) * mask


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    n = mask.sum().clamp(min=1.0)
    mean = (values * mask).sum() / n
    var = ((values - mean) ** 2 * mask).sum() / n
    return (values - mean) / (var.sqrt() + eps) * mask


def clipped_objective(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                      clip: float) -> torch.Tensor:
    """− token-mean of min(ρA, clip(ρ)A): the loss to minimise."""
    ratio = (logp - old_logp).exp()
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    return -(surrogate * mask).sum() / mask.sum().clamp(min=1.0)


# -------------------------------------------------------------------------------------------------- training
@dataclass
class Batch:
    groups: list[tuple[Problem, list[list[int]], torch.Tensor]]   # problem, response ids, outcomes
    accuracy: float          # before the filter
    mean_length: float       # response tokens


def sample_groups(model, tokenizer, problems: Sequence[Problem], cfg: ReasonRLConfig, check, end: int,
                  seed: int) -> Batch:
    """`cfg.group` responses to each problem, checked; the groups the accuracy filter keeps."""
    backend = HFBackend(model, tokenizer.pad_token_id, end)
    prompts = [prompt_ids(tokenizer, p) for p in problems]
    ids = backend.generate(prompts, cfg.group, cfg.temperature, cfg.max_new_tokens, seed)
    groups, right, lengths = [], [], []
    for problem, responses in zip(problems, ids):
        texts = [response_text(tokenizer, r, end) for r in responses]
        outcomes = torch.tensor([float(check(problem, t)) for t in texts])
        right += outcomes.tolist()
        lengths += [len(r) for r in responses]
        acc = float(outcomes.mean())
        if cfg.filter_low <= acc <= cfg.filter_high and all(responses):
            groups.append((problem, responses, outcomes))
    return Batch(groups, sum(right) / len(right), sum(lengths) / len(lengths))


def greedy_outcomes(model, tokenizer, problems: Sequence[Problem], check, max_new_tokens: int = 160) -> dict[str, bool]:
    """Whether the greedy solution of each problem is right, by problem id."""
    outs = HFCompleter(model, tokenizer, 0.0, max_new_tokens).complete(problems, [""] * len(problems), 1, 0)
    return {p.id: bool(check(p, o[0])) for p, o in zip(problems, outs)}


def accuracy(model, tokenizer, problems: Sequence[Problem], check, max_new_tokens: int = 160) -> float:
    """Greedy accuracy."""
    outcomes = greedy_outcomes(model, tokenizer, problems, check, max_new_tokens)
    return sum(outcomes.values()) / len(outcomes)


class _LoopState:
    """What a resumed RL run needs besides the weights, as one `state_dict` for a checkpoint slot
    (train/checkpoint.py): both optimizers, the problem order still to draw, and its RNG."""

    def __init__(self, optimizer, prm_optimizer, rng: random.Random, order: list[int]):
        self.optimizer, self.prm_optimizer, self.rng, self.order = optimizer, prm_optimizer, rng, order

    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {"optimizer": self.optimizer.state_dict(),
                "prm_optimizer": self.prm_optimizer.state_dict() if self.prm_optimizer else None,
                "rng": [version, list(internal), gauss], "order": list(self.order)}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.prm_optimizer is not None:
            self.prm_optimizer.load_state_dict(state["prm_optimizer"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.order[:] = state["order"]


def train_rl(model, tokenizer, problems: Sequence[Problem], cfg: ReasonRLConfig, check: Callable[[Problem, str], bool],
             eval_problems: Sequence[Problem] = (), seed: int = 0, on_log: Callable[[dict], None] | None = None
             ) -> list[dict]:
    """Run `cfg.steps` RL steps on `model` in place; returns one log row per step (accuracy of the sampled batch,
    groups kept, mean response length, entropy, loss, seconds; `eval_accuracy` at eval steps). Inside a
    `resumable` block (`agentprm reason rl`: --checkpoint-every-s) the run keeps a checkpoint, and the same run
    started again continues after its last saved step to the weights an uninterrupted run ends with."""
    cfg.check()
    end, pad = end_of_turn_id(tokenizer), tokenizer.pad_token_id
    # π_ref: a frozen copy — or, for a LoRA policy, the same model with its adapters switched off (no second copy)
    reference = None if hasattr(model, "disable_adapter") else copy.deepcopy(model).eval().requires_grad_(False)
    implicit = copy.deepcopy(model) if cfg.algo == "prime" else None
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    prm_optimizer = (torch.optim.AdamW([p for p in implicit.parameters() if p.requires_grad], lr=cfg.prime_lr)
                     if implicit is not None else None)
    state = _LoopState(optimizer, prm_optimizer, random.Random(f"reason-rl:{seed}"), [])
    named = {f"policy.{n}": p for n, p in model.named_parameters() if p.requires_grad}
    if implicit is not None:
        named.update({f"implicit.{n}": p for n, p in implicit.named_parameters() if p.requires_grad})
    checkpoints = active_checkpoints()
    slot = (checkpoints.slot(fingerprint(f"reason rl {cfg.algo}", len(problems), {**asdict(cfg), "seed": seed},
                                         named)) if checkpoints else None)
    resumed = slot.load(named, state, None) if slot else None
    rows: list[dict] = resumed["history"] if resumed else []
    start = time.monotonic() - (rows[-1]["seconds"] if rows else 0.0)
    for step in range(len(rows) + 1, cfg.steps + 1):
        if len(state.order) < cfg.prompts:
            fresh = list(range(len(problems)))
            state.rng.shuffle(fresh)
            state.order += fresh
        chosen = [problems[k] for k in state.order[:cfg.prompts]]
        del state.order[:cfg.prompts]
        model.eval()
        batch = sample_groups(model, tokenizer, chosen, cfg, check, end, seed=seed * 100_003 + step)
        row = {"step": step, "batch_accuracy": round(batch.accuracy, 4), "groups": len(batch.groups),
               "mean_length": round(batch.mean_length, 2)}
        if batch.groups:
            row.update(_update(model, reference, implicit, optimizer, prm_optimizer, tokenizer, batch, cfg, pad))
        row["seconds"] = round(time.monotonic() - start, 2)
        if eval_problems and ((cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps):
            model.eval()
            row["eval_accuracy"] = round(accuracy(model, tokenizer, eval_problems, check), 4)
        rows.append(row)
        if on_log is not None:
            on_log(row)
        if slot and (step == cfg.steps or slot.due()):
            slot.save(step, named, state, None, rows, [], finished=step == cfg.steps)
    return rows


def _update(model, reference, implicit, optimizer, prm_optimizer, tokenizer, batch: Batch, cfg: ReasonRLConfig,
            pad: int) -> dict:
    prompts, responses, outcomes, spans = [], [], [], []
    for problem, resp, outs in batch.groups:
        p = prompt_ids(tokenizer, problem)
        spans.append((len(responses), len(responses) + len(resp)))
        prompts += [p] * len(resp)
        responses += resp
        outcomes.append(outs)
    with torch.no_grad():
        old, mask, _ = token_logprobs(model, prompts, responses, pad)
        with model.disable_adapter() if reference is None else nullcontext():
            ref, _, _ = token_logprobs(model if reference is None else reference, prompts, responses, pad)
    advantages = torch.zeros_like(old)
    metrics: dict = {}
    if cfg.algo == "prime":
        implicit.eval()
        with torch.no_grad():
            rewards = cfg.beta * (token_logprobs(implicit, prompts, responses, pad)[0] - ref) * mask
        returns = torch.zeros_like(old)
        for (a, b), outs in zip(spans, outcomes):
            returns[a:b] = prime_token_returns(outs, rewards[a:b], mask[a:b], cfg.prime_outcome_coef,
                                               cfg.prime_process_coef)
        advantages = whiten(returns, mask)
        metrics["prm_loss"] = _update_implicit(implicit, prm_optimizer, prompts, responses, ref, mask,
                                               torch.cat(outcomes), cfg.beta, pad)
    else:   # SPRO's process reward is π_old's log-ratio to π_ref: fixed for the step's epochs, like the outcome's
        log_ratio = old - ref
        for (a, b), outs in zip(spans, outcomes):
            advantages[a:b] = (grpo_token_advantages(outs, mask[a:b]) if cfg.algo == "grpo" else
                               spro_token_advantages(outs, log_ratio[a:b], mask[a:b], cfg.beta))
    model.train()
    for _ in range(cfg.ppo_epochs):
        logp, _, ent = token_logprobs(model, prompts, responses, pad, entropy=True)
        entropy = (ent * mask).sum() / mask.sum()
        loss = clipped_objective(logp, old, advantages, mask, cfg.clip) - cfg.entropy_coef * entropy
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    metrics.update(loss=round(loss.item(), 5), entropy=round(entropy.item(), 4),
                   kl_ref=round(float(((old - ref) * mask).sum() / mask.sum()), 5))
    return metrics


def _update_implicit(implicit, optimizer, prompts, responses, ref: torch.Tensor, mask: torch.Tensor,
                     outcomes: torch.Tensor, beta: float, pad: int) -> float:
    """One cross-entropy step of the implicit PRM: σ(β Σ_t log π_φ/π_ref) against the outcomes."""
    implicit.train()
    logp, _, _ = token_logprobs(implicit, prompts, responses, pad)
    score = beta * ((logp - ref) * mask).sum(1)
    loss = F.binary_cross_entropy_with_logits(score, outcomes.to(score.device))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(implicit.parameters(), 1.0)
    optimizer.step()
    return round(loss.item(), 5)
