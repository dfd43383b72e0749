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
