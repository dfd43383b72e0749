"""Batched rollouts: K environments in worker processes, one batched `agent.act` call per turn for all of them.

    episodes = run_episodes(jobs, agent, num_envs=8, num_workers=2, writer=ShardWriter(out))

Each `EpisodeJob` names a task, an episode id and the step budget. Episodes are independent, so for a
deterministic agent the results do not depend on how many run at once. Every turn becomes a `StepRecord`
(agentprm/data/trajectories.py); an episode whose env failed (a worker crash, a bad game) is kept with its
`error` and counts as not won.

A job may carry `start_actions` (Reset-50-50, see agentprm/rollout/reset.py): the engine plays them first, in place
of the agent, then hands over. Their rows are stored like any other (so replaying the episode rebuilds exactly the
states the agent saw); the job's episode id marks how many there are (`reset.prefix_length`).
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from agentprm.agent.format import parse_reply
from agentprm.agent.policies import Agent
from agentprm.agent.state import AgentState
from agentprm.data.trajectories import EpisodeRecord, StepRecord
from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import TaskSpec
from agentprm.envs.base import Turn
from agentprm.envs.pool import EnvPool
from agentprm.progress import progress_bar


@dataclass(frozen=True)
class EpisodeJob:
    task: TaskSpec
    episode_id: str
    seed: int = 0
    max_steps: int = 50
    start_actions: tuple[str, ...] = ()   # played before the agent takes over (counted in max_steps)


@dataclass
class _Active:
    record: EpisodeRecord
    state: AgentState
    turn: Turn
    prefix: deque[str]   # start actions still to play


def episode_jobs(tasks: Sequence[TaskSpec], per_task: int, seed: int, max_steps: int, tag: str) -> list[EpisodeJob]:
    return [EpisodeJob(task=t, episode_id=f"{tag}-s{seed}-{t.task_id}-{k}", seed=seed, max_steps=max_steps)
            for t in tasks for k in range(per_task)]


def _env_factory(job: EpisodeJob, expert: bool):
    return functools.partial(AlfWorldEnv, job.task.game, max_steps=job.max_steps, task_id=job.task.task_id,
                             expert=expert)


def _record(job: EpisodeJob, policy: str, task_text: str = "", error: str = "") -> EpisodeRecord:
    return EpisodeRecord(episode_id=job.episode_id, task_id=job.task.task_id, task_type=job.task.task_type,
                         task=task_text, policy=policy, seed=job.seed, error=error)


def run_episodes(jobs: Iterable[EpisodeJob], agent: Agent, *, num_envs: int = 8, num_workers: int | None = None,
                 writer=None, progress: bool = True, description: str = "rollout",
                 pool: EnvPool | None = None) -> list[EpisodeRecord]:
    """Play every job to the end; returns the episodes sorted by id (and hands each to `writer.add` as it ends).
    `pool`: play on this (already started) pool's slots instead of starting one; it is left open."""
    pending = deque(jobs)
    total = len(pending)
    num_envs = max(1, min(pool.num_slots if pool else num_envs, total))
    num_workers = max(1, min(num_workers or os.cpu_count() or 1, num_envs))
    finished: list[EpisodeRecord] = []
    active: dict[int, _Active] = {}

    def finish(record: EpisodeRecord) -> None:
        finished.append(record)
        if writer is not None:
            writer.add(record)
        bar.advance()

    with (contextlib.nullcontext(pool) if pool else EnvPool(num_workers, num_slots=num_envs)) as pool, \
            progress_bar(total, description, progress) as bar:
        while pending or active:
            free = [s for s in range(num_envs) if s not in active][:len(pending)]
            jobs_for = {s: pending.popleft() for s in free}
            starts = pool.reset_many({s: _env_factory(j, agent.needs_expert) for s, j in jobs_for.items()})
            for s, job in jobs_for.items():
                turn = starts[s]
                if turn.info.get("error"):
                    finish(_record(job, agent.name, error=turn.info["error"]))
                else:
                    active[s] = _Active(_record(job, agent.name, turn.task), AgentState.start(turn, job.task.task_id),
                                        turn, deque(job.start_actions))
            if not active:
                continue
            slots = list(active)
            acting = [s for s in slots if not active[s].prefix]
            chosen = agent.act([active[s].state for s in acting], [active[s].turn for s in acting]) if acting else []
            replies = dict(zip(acting, chosen))
            replies.update({s: active[s].prefix.popleft() for s in slots if s not in replies})
            commands = {s: parse_reply(replies[s])[1] for s in slots}
            results = pool.step(commands)
            for s, reply in replies.items():
                a, nxt = active[s], results[s]
                a.record.steps.append(StepRecord.from_turns(len(a.record.steps), a.turn, reply, nxt))
                if nxt.done:
                    a.record.error = nxt.info.get("error", "")
                    finish(a.record)
                    del active[s]
                else:
                    a.state, a.turn = a.state.advance(commands[s], nxt), nxt
    finished.sort(key=lambda r: r.episode_id)
    return finished
