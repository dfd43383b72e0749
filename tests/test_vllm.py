"""OpenAIBackend against the real engine: a vLLM server on the CPU (its own virtualenv, `make vllm-venv`) serving the
bundled π0, started once for the module by agent/serving.py. Deselected by `make test`; `make test-vllm` (run by
CI) builds the virtualenv and runs them, and there a missing vLLM fails instead of skipping."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import agentprm
from agentprm.agent.encoding import PromptConfig, end_of_turn_id, prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.lm import HFBackend
from agentprm.agent.remote import BackendConfig, OpenAIBackend
from agentprm.agent.serving import VLLMServer, vllm_python
from agentprm.agent.state import AgentState
from agentprm.cli import main
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.models import load_causal_lm, load_tokenizer

pytestmark = pytest.mark.vllm
POLICY = Path(agentprm.__file__).parent / "assets" / "policy"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        vllm_python()
    except UserError:
        if os.environ.get("AGENTPRM_REQUIRE_VLLM"):
            pytest.fail("no Python with vLLM (make vllm-venv)")
        pytest.skip("no Python with vLLM: make vllm-venv")
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    with VLLMServer(POLICY, log=log) as s:
        yield s


@pytest.fixture(scope="module")
def both(server):
    tok = load_tokenizer(POLICY)
    eos = end_of_turn_id(tok)
    return (HFBackend(load_causal_lm(POLICY), tok.pad_token_id, eos),
            OpenAIBackend(BackendConfig(backend="openai", base_url=server.url), tok, POLICY, eos), tok)


def test_choose_mode_scores_match_transformers(both, first_turns):
    local, remote, tok = both
    prompts, cands = [], []
    for turn in first_turns[1:]:
        prompts.append(prompt_ids(tok, AgentState.start(turn), PromptConfig()))
        cands.append([reply_ids(tok, format_reply(c)) for c in turn.admissible])
    for a, b in zip(local.score(prompts, cands), remote.score(prompts, cands)):
        assert a.shape == b.shape and (a - b).abs().max() < 1e-4


def test_generation_is_greedy_equal_and_reproducible_by_seed(both, first_turns):
    local, remote, tok = both
    prompt = [prompt_ids(tok, AgentState.start(first_turns[1]), PromptConfig())]
    greedy = remote.generate(prompt, 1, 0.0, 24, seed=0)
    assert greedy == local.generate(prompt, 1, 0.0, 24, seed=0) and greedy[0][0][-1] == end_of_turn_id(tok)
    # π0 is near-certain at a real state; a raw text prompt leaves it unsure, so T = 1 draws differ
    raw = [tok("the mug is in the", add_special_tokens=False)["input_ids"]] * 2
    sampled = remote.generate(raw, 4, 1.0, 12, seed=5)
    assert sampled == remote.generate(raw, 4, 1.0, 12, seed=5) != remote.generate(raw, 4, 1.0, 12, seed=6)
    assert len({tuple(c) for row in sampled for c in row}) > 1


@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_greedy_eval_transcripts_equal_the_in_process_backend(server, generated_tasks, tmp_path, mode):
    actions = {}
    for backend in ("hf", "openai"):
        out = tmp_path / backend
        assert main(["rollout", "--policy", str(POLICY), "--tasks", str(generated_tasks.eval), "--per-task", "1",
                     "--temperature", "0", "--max-steps", "8", "--workers", "1", "--mode", mode, "--out", str(out),
                     "--backend", backend, "--base-url", server.url]) == 0
        actions[backend] = {e.episode_id: [s.action for s in e.steps] for e in iter_episodes(read_trajectories(out))}
    assert actions["hf"] == actions["openai"] and len(actions["hf"]) == generated_tasks.num


def test_a_loop_iteration_with_backend_openai_equals_the_in_process_loop(server, tmp_path, generated_tasks,
                                                                          tiny_policy):
    """The loop's own supervised servers (π0, then π1; not the module's): every eval row and rollout equals the
    in-process loop's for the same seed (choose mode: the server scores, the loop samples)."""
    from test_loop import loop_in_process_and_served

    served = loop_in_process_and_served(tmp_path, generated_tasks, tiny_policy)
    assert (served / "serve.log").read_text().count("Application startup complete") == 2


def test_zz_a_killed_server_is_a_one_line_error_and_the_rollout_resumes(server, generated_tasks, tmp_path, capsys):
    """Last in the module: it stops the server. Episodes finished before the kill are kept; --resume plays the rest
    (in-process here), and the finished folder equals an uninterrupted greedy rollout."""
    import threading
    import time

    out, ref = tmp_path / "rollout", tmp_path / "ref"
    args = ["rollout", "--policy", str(POLICY), "--tasks", str(generated_tasks.train), "--per-task", "2",
            "--temperature", "0", "--max-steps", "30", "--workers", "1", "--num-envs", "2"]
    threading.Thread(target=lambda: (time.sleep(4.0), server.stop()), daemon=True).start()
    assert main([*args, "--out", str(out), "--backend", "openai", "--base-url", server.url, "--retries", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentprm rollout: error: ") and "no answer after 2 tries" in err and "\n" not in err
    assert main([*args, "--out", str(out), "--resume"]) == 0
    assert main([*args, "--out", str(ref)]) == 0
    steps = lambda d: {e.episode_id: [s.action for s in e.steps] for e in iter_episodes(read_trajectories(d))}  # noqa: E731
    assert steps(out) == steps(ref) and len(steps(ref)) == 2 * generated_tasks.num
