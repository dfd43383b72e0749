"""Batched rollouts: K environments in worker processes, one batched `agent.act` call per turn for each half of them.

    episodes = run_episodes(jobs, agent, num_envs=8, num_workers=2, writer=ShardWriter(out))

The slots form two groups, each spread over all workers, that take turns: while the workers step one group's
envs, the agent computes the other group's replies, so model time and env time overlap instead of adding up.
Each `EpisodeJob` names a task, an episode id and the step budget. Episodes are independent, so for a
deterministic agent the results do not depend on how many run at once. Every turn becomes a `StepRecord`
(agentprm/data/trajectories.py); an episode whose env failed (a worker crash, a bad game) is kept with its
`error` and counts as not won.

A job may carry `start_actions` (Reset-50-50, see agentprm/rollout/reset.py): the engine plays them first, in place
of the agent, then hands over. Their rows are stored like any other (so replaying the episode rebuilds exactly the
states the agent saw); the job's `origin` / `origin_turn` become the episode's provenance columns.
"""
from __future__ import annotations

import contextlib
import os
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Sequence

from agentprm.agent.format import parse_reply
from agentprm.agent.policies import Agent
from agentprm.agent.state import AgentState
from agentprm.data.trajectories import EpisodeRecord, StepRecord
from agentprm.envs.base import TaskSpec, Turn
from agentprm.envs.pool import EnvPool, open_pool
from agentprm.envs.registry import env_factory, require_replay
from agentprm.models.device import sharing_cores
from agentprm.progress import progress_bar


@dataclass(frozen=True)
class EpisodeJob:
    task: TaskSpec
    episode_id: str
    seed: int = 0
    max_steps: int = 50
    start_actions: tuple[str, ...] = ()   # played before the agent takes over (counted in max_steps)
    origin: str = ""                      # the episode's provenance columns (data/trajectories.py): "reset" or
    origin_turn: int = 0                  # "branch" and the turn where it leaves its source


@dataclass
class _Active:
    job: EpisodeJob
    record: EpisodeRecord
    state: AgentState
    turn: Turn
    prefix: deque[str]   # start actions still to play


def episode_jobs(tasks: Sequence[TaskSpec], per_task: int, seed: int, max_steps: int, tag: str) -> list[EpisodeJob]:
    return [EpisodeJob(task=t, episode_id=f"{tag}-s{seed}-{t.task_id}-{k}", seed=seed, max_steps=max_steps)
            for t in tasks for k in range(per_task)]


def _record(job: EpisodeJob, policy: str, task_text: str = "", error: str = "") -> EpisodeRecord:
    return EpisodeRecord(episode_id=job.episode_id, task_id=job.task.task_id, task_type=job.task.task_type,
                         task=task_text, policy=policy, seed=job.seed, error=error, origin=job.origin,
                         origin_turn=job.origin_turn)


def run_episodes(jobs: Iterable[EpisodeJob], agent: Agent, *, num_envs: int = 8, num_workers: int | None = None,
                 writer=None, progress: bool = True, description: str = "rollout",
                 pool: EnvPool | None = None) -> list[EpisodeRecord]:
    """Play every job to the end; returns the episodes sorted by id (and hands each to `writer.add` as it ends).
    `pool`: play on this (already started) pool's slots instead of starting one; it is left open."""
    pending = deque(jobs)
    require_replay([j.task for j in pending if j.start_actions], "starting an episode from a recorded state "
                   "(branch rollouts, Reset-50-50, the oracle critic)")
    total = len(pending)
    num_envs = max(1, min(pool.num_slots if pool else num_envs, total))
    num_workers = pool.num_workers if pool else max(1, min(num_workers or os.cpu_count() or 1, num_envs))
    finished: list[EpisodeRecord] = []
    active: dict[int, _Active] = {}
    replayed: set[str] = set()   # episodes lost with a crashed worker and played again (once each)

    def replay(job: EpisodeJob, turn: Turn) -> bool:
        """A worker crash costs only the episodes it hosted, and those are played again once on a fresh worker."""
        if not turn.info.get("worker_lost") or job.episode_id in replayed:
            return False
        replayed.add(job.episode_id)
        pending.appendleft(job)
        return True

    def finish(record: EpisodeRecord) -> None:
        finished.append(record)
        if writer is not None:
            writer.add(record)
        bar.advance()

    def start(s: int, job: EpisodeJob, turn: Turn) -> None:
        if turn.info.get("error"):
            if not replay(job, turn):
                finish(_record(job, agent.name, error=turn.info["error"]))
        else:
            active[s] = _Active(job, _record(job, agent.name, turn.task), AgentState.start(turn, job.task.task_id),
                                turn, deque(job.start_actions))

    def advance(s: int, reply: str, command: str, considered: tuple, nxt: Turn) -> None:
        a = active[s]
        a.record.steps.append(StepRecord.from_turns(len(a.record.steps), a.turn, reply, nxt, considered))
        if nxt.done:
            a.record.error = nxt.info.get("error", "")
            if not replay(a.job, nxt):
                finish(a.record)
            del active[s]
        else:
            a.state, a.turn = a.state.advance(command, nxt), nxt

    def requests_for(slots: list[int]) -> tuple[dict, dict]:
        """One turn of a group: the agent's replies (or replayed start actions) for its running episodes, and
        resets of its free slots for pending jobs."""
        acting = [s for s in slots if s in active and not active[s].prefix]
        chosen = agent.act([active[s].state for s in acting], [active[s].turn for s in acting]) if acting else []
        # what the agent weighed per state (Best-of-N: its samples and their scores), kept in the step's record
        weighed = dict(zip(acting, getattr(agent, "considered", None) or [])) if acting else {}
        replies = dict(zip(acting, chosen))
        replies.update({s: active[s].prefix.popleft() for s in slots if s in active and s not in replies})
        requests, sent = {}, {}
        for s, reply in replies.items():
            command = parse_reply(reply)[1]
            requests[s], sent[s] = ("step", command), (reply, command, weighed.get(s, ((), ())))
        for s in [s for s in slots if s not in active][:len(pending)]:
            job = pending.popleft()
            requests[s], sent[s] = ("reset", env_factory(job.task, job.max_steps, agent.needs_expert)), job
        return requests, sent

    # Two groups of slots, each spread over all workers, take turns: while the workers step one group, the agent
    # thinks for the other (one group when there are too few slots to split).
    split = num_envs >= 2 * num_workers
    groups = [[s for s in range(num_envs) if not split or (s // num_workers) % 2 == g] for g in range(1 + split)]
    in_flight: dict[int, tuple] = {}   # group -> (ticket, what was sent per slot); gathered oldest first
    with (contextlib.nullcontext(pool) if pool else open_pool(num_workers, num_slots=num_envs)) as pool, \
            sharing_cores(pool.local_workers), progress_bar(total, description, progress) as bar:
        while pending or active or in_flight:
            for g, slots in enumerate(groups):
                if g in in_flight:
                    ticket, sent = in_flight.pop(g)
                    for s, turn in pool.gather(ticket).items():
                        if isinstance(sent[s], EpisodeJob):
                            start(s, sent[s], turn)
                        else:
                            advance(s, *sent[s], turn)
                requests, sent = requests_for(slots)
                if requests:
                    in_flight[g] = (pool.submit(requests), sent)
    finished.sort(key=lambda r: r.episode_id)
    return finished
