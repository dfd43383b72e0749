"""`RayEnvPool`: the `EnvPool` (envs/pool.py) with its env workers as Ray actors — on an existing cluster
(`ray.init(address=...)`) or a local Ray started on first use — for rollouts spread over machines.

Same slots, tickets and failure model as the process pool; only the transport differs: a batch of requests is one
actor call, its answer an object ref. An actor that dies (its process killed, its node lost) or does not answer
within `timeout` is replaced by a fresh one, and the episodes it hosted fail with `worker_lost`, which the rollout
engine plays again once, exactly as with a lost worker process. Episodes depend only on the jobs' seeds, so a seed
gives the same episodes on Ray as on local processes (tests/test_ray_pool.py, on a local Ray cluster).
"""
from __future__ import annotations

import os
import pickle
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agentprm.envs.pool import EnvPool, _close_quietly, _describe, _limit_threads, _serve


class _EnvHost:
    """The actor: a worker process's env slots (envs/pool.py `_worker_main`, one call per batch)."""

    def __init__(self) -> None:
        _limit_threads()
        self.envs: dict[int, Any] = {}

    def pid(self) -> int:
        return os.getpid()

    def serve(self, payload: bytes) -> list:
        return [(slot, *_serve(self.envs, cmd, slot, arg)) for slot, cmd, arg in pickle.loads(payload)]

    def close(self) -> None:
        for env in self.envs.values():
            _close_quietly(env)
        self.envs.clear()


@dataclass
class _Actor:
    handle: Any
    refs: deque = field(default_factory=deque)   # answers not yet collected, oldest first (one per ticket)


def ray_init(address: str = "") -> None:
    """Connect to the cluster at `address`, or start a local Ray (no dashboard), once per process."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": max(2, os.cpu_count() or 1)}))


class RayEnvPool(EnvPool):
    def __init__(self, num_workers: int, *, num_slots: int | None = None, timeout: float | None = None,
                 address: str = "", **_):
        import ray

        ray_init(address)
        self._remote = ray.remote(num_cpus=1, max_restarts=0)(_EnvHost)
        self._cluster = bool(address)
        super().__init__(num_workers, num_slots=num_slots, timeout=timeout)

    @property
    def local_workers(self) -> int:
        """All of them on the local Ray this process started; none counted on a cluster, which places them."""
        return 0 if self._cluster else self.num_workers

    def _start(self) -> _Actor:
        return _Actor(self._remote.remote())

    def _stop(self, worker: _Actor) -> None:
        import ray

        ray.kill(worker.handle, no_restart=True)

    def _alive(self, w: int) -> bool:
        return True   # a dead actor is found when its answer is collected

    def _send(self, w: int, payload: bytes) -> None:
        actor = self._workers[w]
        actor.refs.append(actor.handle.serve.remote(payload))

    def _collect(self, workers: list[int]) -> dict[int, list | str]:
        import ray

        refs = {self._workers[w].refs.popleft(): w for w in workers}
        done, not_done = ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout)
        out: dict[int, list | str] = {refs[r]: f"no answer within {self.timeout:g} s" for r in not_done}
        for ref in done:
            try:
                out[refs[ref]] = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as e:
                out[refs[ref]] = f"worker actor died ({_describe(e).splitlines()[0][:200]})"
        for w, replies in out.items():
            if isinstance(replies, str):
                self._replace(w, replies)
        return out

    def close(self) -> None:
        import ray

        for worker in self._workers:
            try:
                ray.get(worker.handle.close.remote(), timeout=10)
            except Exception:   # already dead, or the cluster is gone: nothing left to close
                pass
            self._stop(worker)
        self._workers = []
