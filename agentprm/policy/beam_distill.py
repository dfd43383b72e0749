"""Stage 3 by expert iteration: PRM-guided beam search as the policy-improvement operator, distilled into π.

The PRM-effect study (docs/studies/prm-effect-216.md) measured where a learned Q_i helps: beam search with
(π_{i-1}, Q_i) beats greedy π_{i-1} by ~7 points on unseen games, because beam compares *different states* (its
branches), where Q_i's state-value knowledge holds, while online DPO and Best-of-N need Q_i to rank π's
alternatives *in one state*, where it is near chance. So make the search the teacher (ExIt / AlphaZero-style
policy iteration):

    E_i  = { beam(π_{i-1}, Q_i; width, expand)(task) : task ∈ train tasks }    (× `search_per_task`)
    π_i  = argmin_θ  − Σ_{episode ∈ E_i, won}  Σ_t  log π_θ(a_t | s_t),   θ initialised from π_{i-1}

The won filter uses the train tasks' own outcome (the signal the MC targets are built from); without it every
episode the PRM picked is imitated. The anchor to π_{i-1} is the initialisation and the small step budget
(`steps` × `batch_size` examples at `lr`), not a KL term. The same update with a critic that knows nothing
(`policy.critic: uniform`) is rejection fine-tuning on a random beam: the control that says how much of the gain
is the PRM's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from agentprm.agent.critic import Critic
from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.data.summary import summarize
from agentprm.data.trajectories import EpisodeRecord
from agentprm.errors import UserError
from agentprm.search.beam import play_beam
from agentprm.policy.sft import make_examples, sft_loss
from agentprm.train.core import train

if TYPE_CHECKING:
    from agentprm.policy.config import PolicyUpdateConfig


def search_episodes(generator, critic: Critic, tasks: Sequence, cfg: PolicyUpdateConfig, *, max_steps: int, seed: int,
                    workers: int = 2) -> tuple[list[EpisodeRecord], dict]:
    """E_i: beam(π_{i-1}, critic) on every train task `cfg.search_per_task` times; `generator` samples π_{i-1}."""
    if not tasks:
        raise UserError("policy.method beam-distill needs the train tasks to search on")
    return play_beam(tasks, generator, critic, width=cfg.search_width, expand=cfg.search_expand,
                     max_steps=max_steps, seed=seed, tag="distill", workers=workers, per_task=cfg.search_per_task)


def train_beam_distill(policy, episodes: Sequence[EpisodeRecord], cfg: PolicyUpdateConfig, seed: int = 0,
                       progress: bool = True) -> tuple[list[dict], dict]:
    """Fine-tune `policy.backend.model` (an `LMAgent`) in place on the (won) search episodes with the SFT loss;
    returns the logged metrics and what was distilled (episodes, examples, the search's own success)."""
    kept = [e for e in episodes if not e.error and e.steps and (e.won or not cfg.won_only)]
    if not kept:
        raise UserError(f"beam-distill: none of the {len(episodes)} search episodes "
                        + ("won" if cfg.won_only else "is usable") + "; nothing to distil")
    examples = make_examples(policy.tokenizer, kept, policy.prompt_cfg)
    corrections = _corrections(policy, kept) if policy.mode == "choose" else None
    history = train(policy.backend.model, examples, sft_loss, cfg.train_config(len(examples), seed),
                    description="beam-distill", progress=progress, length=lambda e: len(e.input_ids))
    search = {k: v for k, v in summarize(episodes).items() if k not in ("per_task", "by_type")}
    return history, {"search": search, "episodes_kept": len(kept), "examples": len(examples),
                     "corrections": corrections}


def _corrections(policy, episodes: Sequence[EpisodeRecord]) -> int:
    """How many distilled steps π_{i-1}'s greedy pick disagrees with: where the search teaches something new."""
    pairs = [(s, reply) for e in episodes for s, reply in episode_states(e)]
    greedy = LMAgent(policy.backend, policy.tokenizer, policy.prompt_cfg, mode="choose")
    picks = [a for k in range(0, len(pairs), 64) for a in greedy.act([s for s, _ in pairs[k:k + 64]], [])]
    return sum(a != reply for a, (_, reply) in zip(picks, pairs))
