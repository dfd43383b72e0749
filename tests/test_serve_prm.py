"""the PRM as a reward for other trainers — `agentprm serve-prm` scores every turn of the episodes a plain
HTTP client sends, the scores a loaded PRM gives the same states; bad requests are one-line 400s."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

EPISODE = {"task": "put some apple on fridge.", "steps": [
    {"observation": "You are in the middle of a room. Looking quickly around you, you see a fridge 1.",
     "admissible": ["go to fridge 1", "look", "inventory"], "action": "go to fridge 1"},
    {"observation": "You arrive at fridge 1. The fridge 1 is closed.",
     "admissible": ["open fridge 1", "go to countertop 1", "look"], "action": "open fridge 1"},
    {"observation": "You open the fridge 1. The fridge 1 is open. In it, you see an apple 1.",
     "admissible": ["take apple 1 from fridge 1", "close fridge 1"], "action": "take apple 1 from fridge 1"}]}


def call(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory, tiny_policy):
    from agentprm.prm.model import ProcessRewardModel

    return ProcessRewardModel.init(tiny_policy, seed=0).save(tmp_path_factory.mktemp("prm") / "prm")


def test_a_plain_http_client_gets_the_prms_per_turn_scores(prm_dir, tmp_path):
    from agentprm.agent.replay import episode_states
    from agentprm.data.trajectories import EpisodeRecord, StepRecord
    from agentprm.prm.loading import load_prm

    proc = subprocess.Popen([sys.executable, "-m", "agentprm", "serve-prm", "--prm", str(prm_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {prm_dir} at http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split(" at ")[1].split()[0]
        assert call(url + "/health") == (200, {"status": "ok", "prm": str(prm_dir)})

        second = {**EPISODE, "steps": EPISODE["steps"][:1]}
        status, body = call(url + "/score", {"episodes": [EPISODE, second]})
        assert status == 200 and [len(s) for s in body["scores"]] == [3, 1]
        record = EpisodeRecord("e", "e", "", EPISODE["task"], "client", 0,
                               [StepRecord(t, s["observation"], tuple(s["admissible"]), s["action"])
                                for t, s in enumerate(EPISODE["steps"])])
        states = list(episode_states(record))
        expected = load_prm(prm_dir).score([s for s, _ in states], [a for _, a in states]).tolist()
        assert body["scores"][0] == pytest.approx(expected, abs=1e-6)
        assert body["scores"][1] == pytest.approx(expected[:1], abs=1e-6)   # a prefix scores the same

        bad = {"episodes": [EPISODE, {"task": "x", "steps": [{"observation": "o", "action": 3}]}]}
        assert call(url + "/score", bad) == (400, {"error": "episodes[1].steps[0].action: must be a string, got int"})
        assert call(url + "/score", {"episodes": "all"}) == (400, {"error": "episodes: must be a list"})
        assert call(url + "/nope")[0] == 404
        request = urllib.request.Request(url + "/score", data=b"{not json")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=30)
        assert e.value.code == 400 and json.loads(e.value.read())["error"].startswith("not valid JSON")
        assert proc.poll() is None   # bad requests do not take the server down

        # docs/prm-as-reward.md's client, as a verl reward function would call it
        import re
        from pathlib import Path

        doc = (Path(__file__).resolve().parents[1] / "docs" / "prm-as-reward.md").read_text()
        verl, openrlhf = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
        client: dict = {}
        exec(verl, client)
        client["PRM_URL"] = url
        reward = client["compute_score"]("alfworld", EPISODE["steps"][-1]["action"], None, {"episode": EPISODE})
        assert reward == pytest.approx(expected[-1], abs=1e-6)
        (tmp_path / "prm_client.py").write_text(verl.replace('"http://127.0.0.1:8100"', repr(url)))
        sys.path.insert(0, str(tmp_path))
        try:
            rm: dict = {}
            exec(openrlhf, rm)
            labels = [json.dumps(EPISODE), json.dumps(second)]
            rewards = rm["reward_func"](["q1", "q2"], ["p1", "p2"], labels)
            assert rewards.tolist() == pytest.approx([expected[-1], expected[0]], abs=1e-6)
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("prm_client", None)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_prm_refuses_a_policy_folder_before_listening(tiny_policy, capsys):
    from agentprm.cli import main

    start = time.monotonic()
    assert main(["serve-prm", "--prm", str(tiny_policy), "--port", "0"]) == 2
    assert "not a PRM folder" in capsys.readouterr().err and time.monotonic() - start < 60


def test_a_trl_grpo_trainer_gets_the_prms_scores_as_its_reward(prm_dir, tmp_path):
    """TRL's GRPOTrainer (reward_funcs=[PRMReward(...)]) on the bundled π0, one step on the CPU: the rewards it logs
    are the PRM's Q at the states the dataset rows describe, scored independently here."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentprm.agent.replay import episode_states
    from agentprm.data.trajectories import EpisodeRecord, StepRecord
    from agentprm.errors import UserError
    from agentprm.loop.run import DEFAULT_POLICY
    from agentprm.prm.loading import load_prm
    from agentprm.prm.serve import PRMReward

    prm, seen = load_prm(prm_dir), []

    class Recorded(PRMReward):
        def __call__(self, prompts, completions, **columns):
            scores = super().__call__(prompts, completions, **columns)
            seen.append((completions, columns, scores))
            return scores

    first, second = EPISODE["steps"][:2]
    rows = [{"prompt": f"{EPISODE['task']}\n{s['observation']}\n>", "task": EPISODE["task"], "steps": before,
             "observation": s["observation"], "admissible": s["admissible"]}
            for s, before in ((first, []), (second, [first]))]
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=6, report_to="none", use_cpu=True, logging_steps=1, save_strategy="no",
                      bf16=False, seed=0)
    trainer = GRPOTrainer(model=str(DEFAULT_POLICY), reward_funcs=[Recorded(prm)], args=args,
                          train_dataset=Dataset.from_list(rows))
    trainer.train()

    (completions, columns, scores), = seen
    expected = []
    for k, action in enumerate(completions):
        steps = [StepRecord(t, s["observation"], tuple(s["admissible"]), s["action"])
                 for t, s in enumerate(columns["steps"][k])]
        steps.append(StepRecord(len(steps), columns["observation"][k], tuple(columns["admissible"][k]), action))
        state, reply = list(episode_states(EpisodeRecord("e", "e", "", columns["task"][k], "c", 0, steps)))[-1]
        expected += prm.score([state], [reply]).tolist()
    assert scores == pytest.approx(expected, abs=1e-6)
    logged = trainer.state.log_history[0]
    assert logged["rewards/prm_reward/mean"] == pytest.approx(sum(scores) / len(scores), abs=1e-5)
    with pytest.raises(UserError, match="no 'steps', 'observation' column"):
        PRMReward(prm)(["p"], ["look"], task=["t"])


@pytest.fixture()
def served(prm_dir):
    """An in-process server (thread) for the PRM, closed after the test; a factory taking the server's options."""
    import threading

    from agentprm.prm.loading import load_prm
    from agentprm.prm.serve import PRMServer

    started = []

    def start(**options):
        server = PRMServer(load_prm(prm_dir), str(prm_dir), **options)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server
    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def raw(server, request: bytes) -> tuple[int, dict]:
    """The status and JSON body of a hand-written HTTP request (headers a client library would not send)."""
    import socket

    with socket.create_connection(server.server_address[:2], timeout=30) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(body: bytes, length: str | None = None, headers: str = "") -> bytes:
    length = str(len(body)) if length is None else length
    return (f"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n{headers}\r\n").encode() + body


def test_hostile_requests_are_one_line_400s_and_the_server_stays_up(served):
    from agentprm.prm.serve import MAX_TEXT

    server = served()
    good = json.dumps({"episodes": [EPISODE]}).encode()
    cases = {"Content-Length: -1 (the body limit must hold)": post(b"x" * 1000, "-1"),
             "Content-Length: abc": post(good, "abc"),
             "invalid UTF-8": post(b'{"episodes": "\xff\xfe"}'),
             "100,000-deep nesting": post(b"[" * 100_000 + b"]" * 100_000),
             "a 5,000-digit number": post(b'{"episodes": ' + b"9" * 5000 + b"}"),
             "a lone surrogate": post(json.dumps({"episodes": [{**EPISODE, "task": "\ud800"}]}).encode()),
             "an observation over the text limit": post(json.dumps({"episodes": [{**EPISODE, "steps": [
                 {**EPISODE["steps"][0], "observation": "x " * MAX_TEXT}]}]}).encode())}
    for name, request in cases.items():
        status, body = raw(server, request)
        assert status in (400, 413) and "\n" not in body["error"], (name, status, body)
    status, body = raw(server, post(good))
    assert status == 200 and len(body["scores"][0]) == 3


def test_a_port_in_use_is_a_one_line_error(served):
    from agentprm.errors import UserError

    server = served()
    with pytest.raises(UserError, match="cannot listen there"):
        served(port=server.server_address[1])


def test_a_bearer_token_guards_the_scores_but_not_the_health_check(served):
    server = served(token="s3cret")
    good = json.dumps({"episodes": [EPISODE]}).encode()
    assert raw(server, post(good))[0] == 401
    assert raw(server, post(good, headers="Authorization: Bearer wrong\r\n"))[0] == 401
    assert raw(server, post(good, headers="Authorization: Bearer s3cret\r\n"))[0] == 200
    assert raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_a_large_request_takes_the_model_one_batch_at_a_time():
    """The lock that keeps one forward pass at a time is taken per batch, not across a whole request, so a request of
    many batches lets other clients' batches in between."""
    from agentprm.prm.serve import batched_scores

    class Critic:
        def score(self, states, actions):
            events.append(("score", len(states)))
            return torch.zeros(len(states))

    class Lock:
        def __enter__(self):
            events.append("acquire")

        def __exit__(self, *exc):
            events.append("release")

    import torch

    events: list = []
    assert batched_scores(Critic(), [("s", "a")] * 5, batch=2, lock=Lock()) == [0.0] * 5
    assert events == ["acquire", ("score", 2), "release"] * 2 + ["acquire", ("score", 1), "release"]
