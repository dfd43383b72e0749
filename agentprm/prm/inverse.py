"""InversePRM (arXiv 2502.10325 §4, docs/algorithms.md §2): a PRM learned from demonstrations, no outcome reward.

From r(s,a) = Q(s,a) − γ E_{a′~π}[Q(s′,a′)], the implicit reward of a transition (s, a, s′, a′) is

    Δ = f(s,a) − γ f(s′,a′)          (f(s′,·) = 0 when s′ is terminal)
    L = −E_{D⁺}[log σ(Δ)] − E_{D⁻}[log(1 − σ(Δ))]

D⁺: expert transitions from the demos, a′ re-sampled from π_{i-1} at s′ (as the paper's code does); D⁻: π_{i-1}'s
own transitions from its rollouts (a′ is its logged next reply, already a sample of π_{i-1}). The paper prints
"+ E_{D⁻}[log(1 − σ(Δ))]": minimising that pushes Δ up on both sets and separates nothing.

f is the PRM's *logit* (Q_φ = σ(f) is what `score` returns). On probabilities Δ would be bounded in [−γ, 1], so σ(Δ)
could not leave [0.27, 0.73]: the classifier could never become confident. On logits Δ is unbounded, and σ(f) stays a
monotone map of the learned Q, which is all that online DPO and Best-of-N use (they rank replies).

Transitions come from stored episodes: the step after the last one is terminal when the episode was won; the last
step of a truncated episode (every failed one: ALFWorld has no losing terminal) has no stored s′ and s′ is not
terminal, so that step is dropped; the episode's other steps are kept.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.replay import episode_states
from agentprm.agent.state import AgentState
from agentprm.data.trajectories import EpisodeRecord, iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.prm.model import ProcessRewardModel
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

LOSS_NAME = "inverse-prm"


@dataclass(frozen=True)
class Transition:
    state: AgentState
    reply: str
    next_state: AgentState | None   # None: the episode ended in s′ (won), so f(s′,·) = 0
    next_reply: str | None
    expert: bool


def inverse_prm_loss(delta: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """−mean_{D⁺} log σ(Δ) − mean_{D⁻} log(1 − σ(Δ)) over a batch (softplus form; a class absent from the batch
    contributes 0). `expert` is a bool mask."""
    loss = delta.new_zeros(())
    if expert.any():
        loss = loss + F.softplus(-delta[expert]).mean()
    if (~expert).any():
        loss = loss + F.softplus(delta[~expert]).mean()
    return loss


def transition_deltas(model, batch: Sequence[tuple[Any, Any | None, bool]], gamma: float) -> torch.Tensor:
    """Δ for (seq, next_seq or None, expert) examples; `model.logits_of(seqs)` gives f for each seq, in one call."""
    nexts = [n for _, n, _ in batch if n is not None]
    logits = model.logits_of([s for s, _, _ in batch] + nexts)
    f, f_next = logits[:len(batch)], logits[len(batch):]
    has_next = torch.tensor([n is not None for _, n, _ in batch], device=f.device)
    next_term = torch.zeros_like(f).masked_scatter(has_next, f_next)
    return f - gamma * next_term


def inverse_loss_fn(gamma: float) -> Callable:
    """loss_fn(model, batch) for the training core; works for any model with `logits_of` (a PRM, a table)."""
    def loss_fn(model, batch: Sequence[tuple[Any, Any | None, bool]]) -> tuple[torch.Tensor, dict[str, float]]:
        delta = transition_deltas(model, batch, gamma)
        expert = torch.tensor([e for _, _, e in batch], device=delta.device)
        return inverse_prm_loss(delta, expert), {"accuracy": float(((delta > 0) == expert).float().mean())}
    return loss_fn


def episode_transitions(episode: EpisodeRecord, expert: bool, start: int = 0) -> list[Transition]:
    """(s, a, s′, a′) for every step from turn `start` on with a known s′ (see the module doc); a′ is the episode's
    own next reply."""
    if episode.error or not episode.steps:
        return []
    pairs = list(episode_states(episode))
    out = [Transition(s, a, s2, a2, expert) for (s, a), (s2, a2) in zip(pairs, pairs[1:])]
    if episode.won:
        out.append(Transition(*pairs[-1], None, None, expert))
    return out[start:]   # out[t] is turn t's transition


def resample_next(transitions: Sequence[Transition], policy) -> list[Transition]:
    """The expert's a′ replaced by one sample of `policy` (an `LMAgent`) at s′, all states in one batched call."""
    idx = [k for k, t in enumerate(transitions) if t.next_state is not None]
    samples = policy.sample([transitions[k].next_state for k in idx], [None] * len(idx), 1)
    out = list(transitions)
    for k, (reply,) in zip(idx, samples):
        t = out[k]
        out[k] = Transition(t.state, t.reply, t.next_state, reply, t.expert)
    return out


def build_transitions(demos: Iterable[EpisodeRecord], rollouts: Iterable[EpisodeRecord], policy) -> list[Transition]:
    """D⁺ (demos, a′ re-sampled from `policy` = π_{i-1}) followed by D⁻ (π_{i-1}'s rollouts; the expert prefix of a
    Reset-50-50 episode is not π's, so it is left out)."""
    positives = [t for e in demos for t in episode_transitions(e, expert=True)]
    negatives = [t for e in rollouts for t in episode_transitions(e, expert=False, start=e.policy_turns().start)]
    return resample_next(positives, policy) + negatives


def encode_transitions(prm: ProcessRewardModel, transitions: Sequence[Transition]) -> list[tuple]:
    return [(prm.encode(t.state, t.reply), prm.encode(t.next_state, t.next_reply) if t.next_state else None,
             t.expert) for t in transitions]


@torch.no_grad()
def accuracy(model, examples: Sequence[tuple], gamma: float, batch_size: int = 32) -> dict[str, float]:
    """Share of transitions classified right (Δ > 0 ⇔ expert), and the mean Δ on each class."""
    model.eval()
    deltas = torch.cat([transition_deltas(model, examples[i:i + batch_size], gamma).cpu()
                        for i in range(0, len(examples), batch_size)])
    expert = torch.tensor([e for _, _, e in examples])
    return {"accuracy": float(((deltas > 0) == expert).float().mean()),
            "delta_expert": float(deltas[expert].mean()) if expert.any() else None,
            "delta_learner": float(deltas[~expert].mean()) if (~expert).any() else None}


def read_episodes(path: str | Path) -> list[EpisodeRecord]:
    return list(iter_episodes(read_trajectories(path)))


def train_inverse_prm(demos: str | Path, rollouts: str | Path, policy, init: str | Path, out_dir: str | Path,
                      cfg: TrainConfig, gamma: float = 1.0, progress: bool = False) -> dict[str, Any]:
    """Fit Q_i to D⁺ (demos, a′ ~ `policy`) vs D⁻ (`policy`'s rollouts); save a normal PRM folder to `out_dir`
    (loss "inverse-prm"). `policy` is π_{i-1} as an `LMAgent` (it re-samples a′). Returns the metrics."""
    if not 0.0 <= gamma <= 1.0:
        raise UserError(f"inverse_prm.gamma {gamma}: must be in [0, 1]")
    start = time.monotonic()
    transitions = build_transitions(read_episodes(demos), read_episodes(rollouts), policy)
    n_pos = sum(t.expert for t in transitions)
    if not n_pos or n_pos == len(transitions):
        raise UserError(f"InversePRM needs expert and learner transitions; got {n_pos} from {demos} and "
                        f"{len(transitions) - n_pos} from {rollouts}")
    prm = ProcessRewardModel.init(init, seed=cfg.seed)
    examples = encode_transitions(prm, transitions)
    initial = accuracy(prm, examples, gamma)
    history = train(prm, examples, inverse_loss_fn(gamma), cfg, description="InversePRM", progress=progress)
    metrics = {"loss": LOSS_NAME, "init": str(init), "demos": str(demos), "rollouts": str(rollouts),
               "gamma": gamma, "expert_transitions": n_pos, "learner_transitions": len(transitions) - n_pos,
               "initial": initial, "final": accuracy(prm, examples, gamma), "history": history,
               "train_config": cfg.to_dict(), "seconds": round(time.monotonic() - start, 2)}
    prm.save(out_dir, loss=LOSS_NAME, gamma=gamma, demos=str(Path(demos).resolve()), metrics=metrics["final"])
    return metrics
