"""agent/replicas.py: data-parallel generation replicas — local backends, servers, and Ray actors on a real local Ray
cluster — answer as one backend does (scores, greedy ids, whole rollouts and a loop), a killed actor is restarted
with its call run again, and a replica that fails is a one-line error naming it."""
from __future__ import annotations

import os
import signal

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agentprm.agent.encoding import PromptConfig, end_of_turn_id, prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.lm import HFBackend, LMAgent
from agentprm.agent.remote import BackendConfig
from agentprm.agent.replicas import ReplicatedBackend, shards
from agentprm.agent.state import AgentState
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.errors import UserError
from agentprm.models import load_causal_lm, load_tokenizer
from agentprm.rollout.engine import episode_jobs, run_episodes

torch.set_num_threads(1)


@given(st.integers(0, 50), st.integers(1, 8))
def test_shards_cover_every_item_once_in_order_and_balanced(count, parts):
    got = shards(count, parts)
    assert [i for r in got for i in r] == list(range(count))
    assert len(got) == min(count, parts) and (not got or max(map(len, got)) - min(map(len, got)) <= 1)


def hf(folder):
    tok = load_tokenizer(folder)
    return HFBackend(load_causal_lm(folder), tok.pad_token_id, end_of_turn_id(tok)), tok


def batch(tok, first_turns, k=5):
    _, turn, _ = first_turns
    state = AgentState.start(turn)
    prompts = [prompt_ids(tok, state, PromptConfig())[: 40 + 7 * i] for i in range(k)]   # ragged: padding differs
    cands = [[reply_ids(tok, format_reply(c)) for c in turn.admissible[: 2 + i]] for i in range(k)]
    return prompts, cands


def check_like_one_backend(one, many, tok, first_turns):
    prompts, cands = batch(tok, first_turns)
    for a, b in zip(one.score(prompts, cands), many.score(prompts, cands), strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    assert many.generate(prompts, 2, 0.0, 6, seed=1) == one.generate(prompts, 2, 0.0, 6, seed=1)
    sampled = many.generate(prompts, 3, 1.0, 6, seed=7)
    assert sampled == many.generate(prompts, 3, 1.0, 6, seed=7) != many.generate(prompts, 3, 1.0, 6, seed=8)
    assert [len(r) for r in sampled] == [3] * len(prompts)


def test_local_replicas_answer_as_one_backend(tiny_policy, first_turns):
    one, tok = hf(tiny_policy)
    check_like_one_backend(one, ReplicatedBackend([hf(tiny_policy)[0] for _ in range(3)]), tok, first_turns)


def test_a_failing_replica_is_a_one_line_error_naming_it(tiny_policy, first_turns):
    class Broken:
        def score(self, *a):
            raise RuntimeError("CUDA error: out of memory\n(more lines)")

    one, tok = hf(tiny_policy)
    prompts, cands = batch(tok, first_turns)
    with pytest.raises(UserError, match=r"^generation replica 1 failed in score: RuntimeError: CUDA error: "
                                        r"out of memory$"):
        ReplicatedBackend([one, Broken()]).score(prompts, cands)


def test_one_replica_per_server_listed_in_base_url(tiny_policy, first_turns):
    from fake_openai import serve_folder

    servers = [serve_folder(tiny_policy) for _ in range(2)]
    try:
        cfg = BackendConfig(backend="openai", base_url=",".join(s.url for s in servers))
        agent = LMAgent.load(tiny_policy, backend=cfg)
        assert isinstance(agent.backend, ReplicatedBackend) and len(agent.backend.replicas) == 2
        one, tok = hf(tiny_policy)
        prompts, cands = batch(tok, first_turns)
        for a, b in zip(one.score(prompts, cands), agent.backend.score(prompts, cands), strict=True):
            assert torch.allclose(a, b, atol=1e-4)
        assert all(s.requests for s in servers)   # both servers were asked
    finally:
        for s in servers:
            s.close()
    with pytest.raises(UserError, match="'replicas' is for backend hf"):
        LMAgent.load(tiny_policy, backend=BackendConfig(backend="openai", replicas=2))


# ------------------------------------------------------------------------------------------ Ray actors
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    from agentprm.envs.ray_pool import ray_init

    ray_init()
    yield
    ray.shutdown()


def greedy_rollouts(agent, tasks_dir):
    jobs = episode_jobs(load_tasks(tasks_dir), 1, seed=2, max_steps=5, tag="eval")
    return [[s.action for s in e.steps] for e in run_episodes(jobs, agent, progress=False, num_envs=4, num_workers=1)]


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_ray_replicas_play_the_same_rollouts_and_survive_a_killed_actor(local_ray, tiny_policy, generated_tasks,
                                                                        first_turns):
    agent = LMAgent.load(tiny_policy, backend=BackendConfig(replicas=2), mode="choose")
    replicas = agent.backend
    assert isinstance(replicas, ReplicatedBackend) and len(replicas.replicas) == 2
    one, tok = hf(tiny_policy)
    check_like_one_backend(one, replicas, tok, first_turns)
    expected = greedy_rollouts(LMAgent.load(tiny_policy, mode="choose"), generated_tasks.eval)
    assert greedy_rollouts(agent, generated_tasks.eval) == expected
    # SIGKILL replica 0's process: Ray restarts the actor and runs the lost call again
    pid = ray.get(replicas.replicas[0].__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    assert greedy_rollouts(agent, generated_tasks.eval) == expected
    assert ray.get(replicas.replicas[0].__ray_call__.remote(lambda self: os.getpid())) != pid
    replicas.stop()


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_a_loop_with_ray_replicas_equals_the_in_process_loop(local_ray, tmp_path, generated_tasks, tiny_policy):
    from test_loop import loop_in_process_and_served

    loop_in_process_and_served(tmp_path, generated_tasks, tiny_policy, backend={"backend": "hf", "replicas": 2})
