"""Play an agent on tasks and summarise: the one function behind `agentprm rollout/eval` and the loop's stages."""
from __future__ import annotations

import time
from typing import Sequence

from agentprm.data.summary import summarize
from agentprm.envs.base import TaskSpec
from agentprm.rollout.engine import episode_jobs, run_episodes


def play_tasks(agent, tasks: Sequence[TaskSpec], *, per_task: int, seed: int, max_steps: int, tag: str,
               num_envs: int = 8, workers: int | None = None, writer=None,
               progress: bool = True) -> tuple[list, dict]:
    """Every task `per_task` times; returns the episodes and their summary (success, Wilson CI, by type, time)."""
    start = time.monotonic()
    jobs = episode_jobs(tasks, per_task, seed, max_steps, tag=tag)
    episodes = run_episodes(jobs, agent, num_envs=num_envs, num_workers=workers, writer=writer,
                            description=tag, progress=progress)
    summary = summarize(episodes)
    summary["seconds"] = round(time.monotonic() - start, 1)
    return episodes, summary
