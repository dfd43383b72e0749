"""A Monte-Carlo oracle critic from the resettable simulator: the ground truth a learned PRM approximates.

    Q_oracle(s, a) = mean over `samples` episodes of γ^(T−1−t) · won,

where each episode replays the commands that led to s (`AgentState.commands`, t of them), plays a, and lets the
continuation policy π finish under the same step budget; T is the episode's length, so the discount counts from
the turn of a to the end exactly like the MC targets (targets/mc.py). With a greedy π and ALFWorld's deterministic
engine one sample is exact: Q_oracle = Q^π. It has the PRM's `score(states, replies)` signature, so it can stand
in for Q_i wherever a critic is used — Best-of-N and beam search at test time, the preference source of the
policy update — and serve as ground truth for Q_i's ranking of π's own alternatives (`ranking_vs_oracle`).

Its price is a rollout per (state, action): it needs the simulator at test time, so it is a bound, not a method.
Values are memoised per (state key, reply); the continuations run on one env pool kept open until `close()`.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch

from agentprm.agent.lm import LMAgent
from agentprm.agent.state import AgentState
from agentprm.envs.base import TaskSpec
from agentprm.envs.pool import EnvPool, open_pool
from agentprm.rollout.engine import EpisodeJob, run_episodes


class OracleCritic:
    def __init__(self, tasks: Sequence[TaskSpec], policy, *, gamma: float, max_steps: int, samples: int = 1,
                 num_envs: int = 16, workers: int | None = None, seed: int = 0):
        if samples < 1:
            raise ValueError(f"oracle samples must be at least 1 (got {samples})")
        self.tasks = {t.task_id: t for t in tasks}
        self.policy, self.gamma, self.max_steps, self.samples = policy, gamma, max_steps, samples
        self.num_envs, self.workers, self.seed = num_envs, workers, seed
        self.name = f"oracle({policy.name})"
        self.values: dict[tuple[str, str], float] = {}
        self.episodes = self.errors = 0        # continuation episodes played, and those whose env failed
        self._pool: EnvPool | None = None

    @classmethod
    def greedy(cls, policy_dir, tasks: Sequence[TaskSpec], *, mode: str, gamma: float, max_steps: int,
               num_envs: int = 16, workers: int | None = None, seed: int = 0) -> OracleCritic:
        """Q^π of the greedy policy saved in `policy_dir` (one continuation per (state, action) is exact)."""
        return cls(tasks, LMAgent.load(policy_dir, mode=mode, seed=seed), gamma=gamma, max_steps=max_steps,
                   num_envs=num_envs, workers=workers, seed=seed)

    def score(self, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor:
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        todo = list(dict.fromkeys((s.key(), r) for s, r in zip(states, replies) if (s.key(), r) not in self.values))
        if todo:
            by_key = {s.key(): s for s in states}
            for key, _ in todo:
                if by_key[key].task_id not in self.tasks:
                    raise ValueError(f"oracle: task {by_key[key].task_id!r} is not among the critic's tasks")
            jobs = [EpisodeJob(task=self.tasks[by_key[key].task_id], episode_id=f"oracle-{n}-{k}", seed=self.seed,
                               max_steps=self.max_steps, start_actions=(*by_key[key].commands, reply))
                    for n, (key, reply) in enumerate(todo) for k in range(self.samples)]
            returns: list[list[float]] = [[] for _ in todo]
            for e in run_episodes(jobs, self.policy, pool=self._open(), progress=False):
                n = int(e.episode_id.split("-")[1])
                t = len(by_key[todo[n][0]].commands)   # the turn of the scored action
                returns[n].append(self.gamma ** (len(e.steps) - 1 - t) if e.won and not e.error else 0.0)
                self.episodes += 1
                self.errors += bool(e.error)
            for item, values in zip(todo, returns):
                self.values[item] = float(np.mean(values))
        return torch.tensor([self.values[(s.key(), r)] for s, r in zip(states, replies)], dtype=torch.float32)

    def _open(self) -> EnvPool:
        if self._pool is None:
            self._pool = open_pool(self.workers or os.cpu_count() or 1, num_slots=self.num_envs).__enter__()
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.__exit__(None, None, None)
            self._pool = None

    def __enter__(self) -> OracleCritic:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
