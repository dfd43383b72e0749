"""agent/remote.py OpenAIBackend against the vLLM-layout test double (tests/fake_openai.py): the same transcripts and
scores as the in-process backend, reproducible sampling, retries, and one-line errors for a wrong or absent server."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import pytest
import torch

import agentprm
from agentprm.agent.encoding import PromptConfig, end_of_turn_id, prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.lm import HFBackend
from agentprm.agent.remote import BackendConfig, OpenAIBackend
from agentprm.cli import main
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.models import load_causal_lm, load_tokenizer
from fake_openai import serve_folder

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def served(tiny_policy):
    server = serve_folder(tiny_policy)
    yield server
    server.close()


def backends(folder, url, **cfg):
    tok = load_tokenizer(folder)
    eos = end_of_turn_id(tok)
    return (HFBackend(load_causal_lm(folder), tok.pad_token_id, eos),
            OpenAIBackend(BackendConfig(backend="openai", base_url=url, **cfg), tok, folder, eos), tok)


def test_scores_and_generations_equal_the_in_process_backend(tiny_policy, served, first_turns):
    _, turn, _ = first_turns
    local, remote, tok = backends(tiny_policy, served.url)
    from agentprm.agent.state import AgentState

    state = AgentState.start(turn)
    prompts = [prompt_ids(tok, state, PromptConfig())] * 2
    cands = [[reply_ids(tok, format_reply(c)) for c in turn.admissible]] * 2
    for a, b in zip(local.score(prompts, cands), remote.score(prompts, cands)):
        assert a.shape == (len(turn.admissible),)
        assert torch.allclose(a, b, atol=1e-4)
    # greedy generation is the same ids; sampled generation is reproducible by seed and differs across seeds
    assert remote.generate(prompts[:1], 1, 0.0, 8, seed=3) == local.generate(prompts[:1], 1, 0.0, 8, seed=3)
    one = remote.generate(prompts, 4, 1.0, 8, seed=3)
    assert one == remote.generate(prompts, 4, 1.0, 8, seed=3) != remote.generate(prompts, 4, 1.0, 8, seed=4)
    assert all(len(c) <= 8 for row in one for c in row)


@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_greedy_rollouts_through_the_server_equal_in_process_ones(tiny_policy, served, generated_tasks, tmp_path,
                                                                   mode):
    actions = {}
    for backend in ("hf", "openai"):
        out = tmp_path / backend
        assert main(["rollout", "--policy", str(tiny_policy), "--tasks", str(generated_tasks.train), "--per-task", "1",
                     "--temperature", "0", "--max-steps", "3", "--workers", "1", "--mode", mode, "--out", str(out),
                     "--backend", backend, "--base-url", served.url]) == 0
        actions[backend] = {e.episode_id: [s.action for s in e.steps]
                            for e in iter_episodes(read_trajectories(out))}
    assert actions["hf"] == actions["openai"] and len(actions["hf"]) == generated_tasks.num


def test_a_stop_the_server_leaves_out_still_ends_the_reply_with_end_of_turn(first_turns):
    """vLLM may or may not list the stop token among a completion's tokens; either way the reply ends with it, as the
    in-process backend's do (the bundled π0 closes its replies within a few tokens)."""
    bundled = Path(agentprm.__file__).parent / "assets" / "policy"
    server = serve_folder(bundled, drop_stop_token=True)
    try:
        local, remote, tok = backends(bundled, server.url)
        from agentprm.agent.state import AgentState

        prompt = [prompt_ids(tok, AgentState.start(first_turns[1]), PromptConfig())]
        got = remote.generate(prompt, 2, 0.0, 16, seed=0)
        assert got == local.generate(prompt, 2, 0.0, 16, seed=0)
        assert all(ids[-1] == end_of_turn_id(tok) for ids in got[0])
        assert all(ids[-1] != end_of_turn_id(tok) for ids in server.last_shown)   # the server did leave it out
    finally:
        server.close()


def test_server_errors_are_retried_then_a_one_line_error(tiny_policy, first_turns):
    server = serve_folder(tiny_policy, fail_first=2)
    try:
        _, remote, tok = backends(tiny_policy, server.url, retries=2)
        from agentprm.agent.state import AgentState

        prompt = [prompt_ids(tok, AgentState.start(first_turns[1]), PromptConfig())]
        assert len(remote.generate(prompt, 1, 0.0, 4, seed=0)[0]) == 1     # two 503s, then an answer
        server.fail_first = 5
        _, remote, _ = backends(tiny_policy, server.url, retries=1)
        with pytest.raises(UserError, match=r"no answer after 2 tries \(HTTP 503"):
            remote.generate(prompt, 1, 0.0, 4, seed=0)
    finally:
        server.close()


def test_an_absent_server_or_another_model_is_refused_before_any_episode(tiny_policy, generated_tasks, tmp_path,
                                                                         capsys):
    with socket.socket() as s:       # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["eval", "--tasks", str(generated_tasks.eval), "--max-steps", "2", "--workers", "1", "--backend",
              "openai", "--retries", "0"]
    assert main([*common, "--policy", str(tiny_policy), "--base-url", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no answer after 1 tries (ConnectError" in err and "\n" not in err
    other = tmp_path / "other"
    other.mkdir()
    server = serve_folder(tiny_policy)
    server.model_id = str(other)
    try:
        assert main([*common, "--policy", str(tiny_policy), "--base-url", server.url]) == 2
        assert f"serves {other}, not the policy folder {tiny_policy}" in capsys.readouterr().err
        assert main([*common, "--policy", str(tiny_policy), "--base-url", server.url, "--served-model", "x"]) == 2
        assert f"serves {other}, not 'x'" in capsys.readouterr().err
        # named explicitly, the same weights under another name are accepted
        assert main([*common, "--policy", str(tiny_policy), "--base-url", server.url, "--served-model",
                     str(other)]) == 0
    finally:
        server.close()
    assert main([*common, "--policy", "random", "--base-url", server.url]) == 2
    assert "serves a policy folder, not the random baseline" in capsys.readouterr().err
    assert main([*common, "--policy", str(tiny_policy), "--base-url", "localhost:8000"]) == 2
    assert "field 'base_url' must be one or more comma-separated http:// or https:// URLs" in capsys.readouterr().err


def fake_vllm(tmp_path, body: str) -> Path:
    """An executable standing in for vLLM's Python: `python -m MODULE --model DIR ... --port P ...` runs `body`."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{body}' \"$@\"\n")
    script.chmod(0o755)
    return script


HEALTHY = ("import sys, http.server as h; port = int(sys.argv[sys.argv.index(\"--port\") + 1]); "
           "print(\"up\", sys.argv[1:3], flush=True); "
           "H = type(\"H\", (h.BaseHTTPRequestHandler,), {\"do_GET\": lambda s: (s.send_response(200), s.end_headers()), "
           "\"log_message\": lambda *a: None}); h.HTTPServer((\"127.0.0.1\", port), H).serve_forever()")


def test_the_supervisor_waits_for_health_logs_and_stops_the_server(tiny_policy, tmp_path):
    from agentprm.agent.serving import VLLMServer

    log = tmp_path / "serve.log"
    server = VLLMServer(tiny_policy, python=str(fake_vllm(tmp_path, HEALTHY)), log=log, startup_timeout_s=30)
    with server:
        assert httpx.get(server.url + "/health").status_code == 200
        cmd = server.command()
        assert cmd[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_policy.resolve())]
        assert "--no-enable-chunked-prefill" in cmd     # CPU: seeded requests would kill the engine otherwise
    assert server.proc.poll() is not None and "up" in log.read_text()
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health")


def test_a_server_that_dies_while_starting_is_a_one_line_error_with_its_log(tiny_policy, tmp_path, capsys):
    python = fake_vllm(tmp_path, "import sys; print(\"ValueError: bad model\"); sys.exit(3)")
    log = tmp_path / "serve.log"
    assert main(["serve", "--policy", str(tiny_policy), "--vllm-python", str(python), "--log", str(log),
                 "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "vLLM exited with code 3 while starting" in err and "ValueError: bad model" in err and "\n" not in err
    assert main(["serve", "--policy", str(tmp_path), "--vllm-python", str(python)]) == 2
    assert "not a model folder (no config.json)" in capsys.readouterr().err


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_a_loop_with_backend_openai_serves_each_policy_and_equals_the_in_process_loop(tmp_path, generated_tasks,
                                                                                       tiny_policy, monkeypatch):
    """backend: openai — the loop starts a server for π0 (its eval and the iteration's rollouts), then one for π1 (its
    eval and Best-of-N), through agent/serving.py with the vLLM stand-in; choose-mode scores equal the in-process
    ones, so every row and every rollout equals the in-process loop's."""
    from test_loop import loop_in_process_and_served

    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / 'fake_openai.py'} \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setenv("AGENTPRM_VLLM_PYTHON", str(script))
    served = loop_in_process_and_served(tmp_path, generated_tasks, tiny_policy)
    policies = [line.split()[3] for line in (served / "serve.log").read_text().splitlines()
                if line.startswith("fake vLLM serving")]
    assert policies == [str((served / "policy_0").resolve()), str((served / "iter_1/policy").resolve())]


def test_a_server_does_not_outlive_its_supervisor_killed_with_sigkill(tiny_policy, tmp_path):
    import os
    import signal
    import subprocess
    import time

    python = fake_vllm(tmp_path, HEALTHY)
    supervisor = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from agentprm.agent.serving import VLLMServer; "
        f"s = VLLMServer({str(tiny_policy)!r}, python={str(python)!r}, startup_timeout_s=30); s.start(); "
        "print(s.proc.pid, flush=True); time.sleep(600)")], stdout=subprocess.PIPE, text=True)
    server_pid = int(supervisor.stdout.readline())
    os.kill(server_pid, 0)                       # serving
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(server_pid):
        time.sleep(0.1)
    assert not _alive(server_pid)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:        # a zombie (not yet reaped by init) is not serving
        return f.read().split(")")[-1].split()[0] != "Z"
