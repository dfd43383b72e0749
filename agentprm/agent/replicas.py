"""Data-parallel generation: `ReplicatedBackend` is a `GenerationBackend` (agent/lm.py) that splits every batch of
prompts into contiguous shards, one per replica, runs the shards at once and joins the answers in prompt order.

Replicas are any objects with the backend's two methods, or Ray actor handles of them:
  - `backend: hf, replicas: N` — N Ray actors (`_PolicyReplica`), each loading the policy folder into an in-process
    `HFBackend`; on a cluster with at least N GPUs each actor gets one (Ray sets its CUDA_VISIBLE_DEVICES), else
    they run on CPUs. The folder must be readable on every node (a shared filesystem), as a vLLM server's is.
    The actors join the Ray the env pool uses (`rollout.ray_address` / `--ray-address`; a local Ray otherwise).
  - `backend: openai` with several servers in `base_url` (comma-separated) — one `OpenAIBackend` per server,
    called from threads (HTTP waits, so no Ray is needed); e.g. one vLLM server per GPU.

The backends are pure functions of their arguments, so an actor that dies is restarted by Ray and its call run
again (`max_restarts`/`max_task_retries`); a replica that stays dead is a one-line error naming it.
Greedy answers and choose-mode scores equal one backend's (a row's result does not depend on its batch: left
padding, per-row positions); sampled generations are reproducible for a given seed and replica count (shard k
samples with a seed drawn from the call's seed and k).
"""
from __future__ import annotations

import dataclasses
import random
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from agentprm.agent.encoding import end_of_turn_id
from agentprm.agent.remote import OpenAIBackend, server_urls
from agentprm.envs.ray_pool import ray_init
from agentprm.errors import UserError

RESTARTS = 2   # per actor: Ray restarts a dead replica this many times, re-running the call it was serving


def shards(count: int, parts: int) -> list[range]:
    """`count` items in `parts` contiguous, balanced ranges (sizes differ by at most one; empty ones dropped)."""
    base, extra = divmod(count, parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (k < extra)
        if size:
            out.append(range(start, start + size))
        start += size
    return out


class ReplicatedBackend:
    def __init__(self, replicas: Sequence, names: Sequence[str] | None = None):
        if not replicas:
            raise ValueError("ReplicatedBackend needs at least one replica")
        self.replicas = list(replicas)
        self.names = list(names or [f"replica {k}" for k in range(len(self.replicas))])
        self._threads = ThreadPoolExecutor(len(self.replicas))

    def score(self, prompt_ids, candidate_ids) -> list:
        return self._run("score", len(prompt_ids), lambda r, k: ([prompt_ids[i] for i in r],
                                                                 [candidate_ids[i] for i in r]))

    def generate(self, prompt_ids, n, temperature, max_new_tokens, seed, **restrict) -> list[list[list[int]]]:
        return self._run("generate", len(prompt_ids), lambda r, k: (
            [prompt_ids[i] for i in r], n, temperature, max_new_tokens,
            seed if k == 0 else random.Random(seed * 1_000_003 + k).getrandbits(63)), restrict)

    def stop(self) -> None:
        """Stop the Ray actors (they would also end with the last reference to them) and the threads."""
        for replica in self.replicas:
            if _is_actor(replica):
                import ray

                ray.kill(replica, no_restart=True)
        self._threads.shutdown(wait=False)

    def _run(self, method: str, count: int, args_of, kwargs: dict | None = None) -> list:
        parts = shards(count, len(self.replicas))
        futures = [self._submit(self.replicas[k], method, args_of(r, k), kwargs or {}) for k, r in enumerate(parts)]
        out: list = []
        for k, future in enumerate(futures):
            try:
                out += future.result()
            except UserError:
                raise
            except Exception as e:   # a replica that stayed dead after its restarts, or failed in its own code
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise UserError(f"generation {self.names[k]} failed in {method}: {type(e).__name__}: "
                                f"{first[:300]}") from e
        return out

    def _submit(self, replica, method: str, args: tuple, kwargs: dict) -> Future:
        if _is_actor(replica):
            return getattr(replica, method).remote(*args, **kwargs).future()
        return self._threads.submit(getattr(replica, method), *args, **kwargs)


def _is_actor(replica) -> bool:
    return type(replica).__name__ == "ActorHandle"


class _PolicyReplica:
    """The Ray actor: a policy folder's model as an `HFBackend`, on this actor's GPU if Ray gave it one."""

    def __init__(self, policy_dir: str, threads: int = 1):
        import torch

        from agentprm.agent.lm import HFBackend
        from agentprm.models import load_causal_lm, load_tokenizer

        torch.set_num_threads(threads)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        tokenizer = load_tokenizer(policy_dir)
        self.backend = HFBackend(load_causal_lm(policy_dir).to(device), tokenizer.pad_token_id,
                                 end_of_turn_id(tokenizer))

    def score(self, prompt_ids, candidate_ids) -> list:
        return [t.cpu() for t in self.backend.score(prompt_ids, candidate_ids)]

    def generate(self, prompt_ids, n, temperature, max_new_tokens, seed, **restrict) -> list:
        return self.backend.generate(prompt_ids, n, temperature, max_new_tokens, seed, **restrict)


def ray_replicas(policy_dir: str | Path, count: int, address: str = "") -> ReplicatedBackend:
    """`count` `_PolicyReplica` actors on the Ray at `address` (or the one this process already joined), one GPU
    each where the cluster has that many."""
    import ray

    ray_init(address)
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= count else 0
    actor = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=RESTARTS, max_task_retries=RESTARTS)(_PolicyReplica)
    handles = [actor.remote(str(Path(policy_dir).resolve())) for _ in range(count)]
    return ReplicatedBackend(handles, [f"replica {k} (Ray actor, {'1 GPU' if gpus else 'CPU'})" for k in range(count)])


def server_replicas(cfg, tokenizer, policy_dir: str | Path, end_of_turn: int) -> ReplicatedBackend:
    """One `OpenAIBackend` per server of `cfg.base_url` (comma-separated)."""
    urls = server_urls(cfg.base_url)
    return ReplicatedBackend([OpenAIBackend(dataclasses.replace(cfg, base_url=u), tokenizer, policy_dir, end_of_turn)
                              for u in urls], [f"server {u}" for u in urls])
