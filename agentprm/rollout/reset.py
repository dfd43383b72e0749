"""Reset-50-50 exploration (arXiv 2502.10325 §5): a share of the rollouts start from a state on an expert
demonstration (the expert's actions replayed up to a random turn, then π takes over); the rest start at the task start.

Which jobs reset, and where, is drawn from `random.Random(seed)`: exactly round(reset_frac · jobs) of them among the
jobs whose task has a demo of two or more steps (at least one expert step, at least one left to π). The handover turn
k is uniform in [1, len(demo) − 1]; the job's step budget grows by k so π keeps its own budget.

The replayed prefix is stored in the episode (replaying the rows must rebuild the agent's states) and marked by its
provenance columns, origin "reset" and origin_turn k (data/trajectories.py); `EpisodeRecord.policy_turns()` gives
the turns π chose. A consumer that must only see π's actions (InversePRM's D⁻) starts there. MC Q-targets of the last prefix
step are Q^π(s, a_expert); earlier prefix steps estimate a mixed expert-then-π policy.
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Sequence

from agentprm.agent.format import parse_reply
from agentprm.data.trajectories import EpisodeRecord
from agentprm.envs.base import TaskSpec
from agentprm.errors import UserError
from agentprm.rollout.engine import EpisodeJob, episode_jobs

def expert_actions(demos: Sequence[EpisodeRecord]) -> dict[str, list[str]]:
    """task_id -> the commands of its first won demo."""
    out: dict[str, list[str]] = {}
    for e in demos:
        if e.won and not e.error:
            out.setdefault(e.task_id, [parse_reply(s.action)[1] for s in e.steps])
    return out


def reset_jobs(tasks: Sequence[TaskSpec], demos: dict[str, list[str]], per_task: int, seed: int, max_steps: int,
               tag: str, reset_frac: float) -> list[EpisodeJob]:
    """`episode_jobs(...)` with a seeded share `reset_frac` of them starting on their task's expert demo."""
    if not 0.0 <= reset_frac <= 1.0:
        raise UserError(f"exploration.reset_frac {reset_frac}: must be in [0, 1]")
    jobs = episode_jobs(tasks, per_task, seed, max_steps, tag)
    rng = random.Random(seed)
    eligible = [j for j, job in enumerate(jobs) if len(demos.get(job.task.task_id, ())) >= 2]
    chosen = sorted(rng.sample(eligible, min(len(eligible), round(reset_frac * len(jobs)))))
    for j in chosen:
        job, actions = jobs[j], demos[jobs[j].task.task_id]
        k = rng.randint(1, len(actions) - 1)
        jobs[j] = replace(job, episode_id=f"{job.episode_id}-reset{k}", start_actions=tuple(actions[:k]),
                          max_steps=job.max_steps + k, origin="reset", origin_turn=k)
    return jobs
