"""envs/ray_pool.py on a real local Ray cluster: the same episodes for a seed as the process pool, and a killed
actor costs only the episodes it hosted, replayed once on a fresh actor."""
from __future__ import annotations

import os
import signal

import pytest

ray = pytest.importorskip("ray")

from agentprm.agent.policies import ExpertAgent, RandomAgent  # noqa: E402
from agentprm.envs.alfworld.tasks import load_tasks  # noqa: E402
from agentprm.envs.pool import EnvPool, configure_pool, open_pool  # noqa: E402
from agentprm.envs.ray_pool import RayEnvPool  # noqa: E402
from agentprm.rollout.engine import episode_jobs, run_episodes  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    from agentprm.envs.ray_pool import ray_init

    ray_init()
    yield
    ray.shutdown()


def rows(episodes):
    return [(e.episode_id, e.error, [(s.action, s.reward, s.won) for s in e.steps]) for e in episodes]


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_ray_actors_play_the_same_episodes_as_local_processes(generated_tasks):
    jobs = episode_jobs(load_tasks(generated_tasks.eval), 1, seed=3, max_steps=4, tag="eval")
    with EnvPool(2, num_slots=4) as local, RayEnvPool(2, num_slots=4) as remote:
        a = run_episodes(jobs, RandomAgent(3), pool=local, progress=False)
        b = run_episodes(jobs, RandomAgent(3), pool=remote, progress=False)
        assert local.local_workers == remote.local_workers == 2   # the local Ray's actors share this machine's cores
    assert rows(a) == rows(b) and len(a) == generated_tasks.num and not any(e.error for e in b)
    configure_pool("ray")
    try:
        with open_pool(1, 2) as pool:
            assert isinstance(pool, RayEnvPool) and pool.num_slots == 2
    finally:
        configure_pool("local")


class KillOnce:
    """The expert, killing actor 0's process at its `at`-th call: the episodes on that actor are lost mid-way."""

    needs_expert, name = True, "expert"

    def __init__(self, pool: RayEnvPool, at: int):
        self.inner, self.pool, self.at, self.calls, self.killed = ExpertAgent(), pool, at, 0, None

    def act(self, states, turns):
        self.calls += 1
        if self.calls == self.at:
            self.killed = ray.get(self.pool._workers[0].handle.pid.remote())
            os.kill(self.killed, signal.SIGKILL)
        return self.inner.act(states, turns)


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_a_killed_actor_costs_only_its_episodes_replayed_once(generated_tasks):
    jobs = episode_jobs(load_tasks(generated_tasks.train), 1, seed=0, max_steps=8, tag="rollout")
    with RayEnvPool(2, num_slots=4) as pool:
        reference = run_episodes(jobs, ExpertAgent(), pool=pool, progress=False)
        agent = KillOnce(pool, at=3)
        again = run_episodes(jobs, agent, pool=pool, progress=False)
        assert agent.killed and ray.get(pool._workers[0].handle.pid.remote()) != agent.killed   # replaced
    assert rows(again) == rows(reference) and not any(e.error for e in again)


def test_a_clusters_actors_are_not_counted_against_this_machines_cores(monkeypatch):
    """sharing_cores leaves torch the cores the local env workers do not take; a cluster places its actors."""
    from agentprm.envs import ray_pool

    monkeypatch.setattr(ray_pool, "ray_init", lambda address="": None)   # the module's local Ray stands in
    with RayEnvPool(1, address="ray://cluster:10001") as pool:
        assert pool.num_workers == 1 and pool.local_workers == 0
