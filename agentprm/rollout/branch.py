"""Branching rollouts: Monte-Carlo targets for *other* actions at states π actually visits.

Plain rollouts give each visited state one action, so beyond the first turn almost no state has two actions with
Q-targets: the PRM learns which states (tasks) succeed, not which action is better at a state — and that is the
only thing Best-of-N and the online-DPO preference use. For each rollout episode, up to `per_episode` of its turns
are chosen at random among those where π itself would act differently: `probe` samples from π at the state, and a
sample other than the recorded reply becomes the branch action a′. The branch replays the episode's replies up to
that turn, plays a′, then π continues to the end under the same step budget, so Q̂(s, a′) and Q̂(s, a) are
estimates of Q^π at the same state with the same steps left.

A branch episode has origin "branch" and origin_turn k (the branch turn; data/trajectories.py), and its id is the
parent's with "-branch<k>". The replayed prefix is stored like any other rows (so replaying the episode rebuilds the
states); Q-targets count a branch episode only from turn k on (`EpisodeRecord.first_target_turn`): its earlier rows
are π's recorded replies followed by a forced a′, not a sample of π.
"""
from __future__ import annotations

import random
from typing import Sequence

from agentprm.agent.replay import episode_states
from agentprm.data.trajectories import EpisodeRecord, branch_episode_id
from agentprm.envs.base import TaskSpec
from agentprm.rollout.engine import EpisodeJob

SAMPLE_CHUNK = 64


def branch_jobs(episodes: Sequence[EpisodeRecord], tasks: Sequence[TaskSpec], agent, per_episode: int,
                probe: int, seed: int, max_steps: int) -> list[EpisodeJob]:
    """Up to `per_episode` branch jobs per finished episode (see the module doc). `agent.sample(states, turns, n)`
    draws the `probe` candidate replies per state, all states in one call."""
    by_id = {t.task_id: t for t in tasks}
    rng = random.Random(seed)
    visited = [(e, k, state, reply) for e in episodes if not e.error and e.task_id in by_id
               for k, (state, reply) in enumerate(episode_states(e))]
    samples = [replies for start in range(0, len(visited), SAMPLE_CHUNK)  # chunks bound the scoring memory
               for replies in agent.sample([v[2] for v in visited[start:start + SAMPLE_CHUNK]],
                                           [None] * len(visited[start:start + SAMPLE_CHUNK]), probe)]
    options: dict[str, list[tuple[int, str]]] = {}
    for (episode, k, _, reply), replies in zip(visited, samples):
        others = [r for r in dict.fromkeys(replies) if r != reply]
        if others:
            options.setdefault(episode.episode_id, []).append((k, rng.choice(others)))
    jobs = []
    for episode in episodes:
        chosen = options.get(episode.episode_id, [])
        for k, alternative in sorted(rng.sample(chosen, min(per_episode, len(chosen)))):
            prefix = tuple(s.action for s in episode.steps[:k]) + (alternative,)
            jobs.append(EpisodeJob(task=by_id[episode.task_id], episode_id=branch_episode_id(episode.episode_id, k),
                                   seed=episode.seed, max_steps=max_steps, start_actions=prefix,
                                   origin="branch", origin_turn=k))
    return jobs
