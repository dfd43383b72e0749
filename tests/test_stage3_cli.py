"""`agentprm train-policy` (online DPO against a PRM) and `agentprm eval --prm --best-of/--beam-width`."""
from __future__ import annotations

import json

import pytest

from agentprm.cli import main
from agentprm.data.summary import wilson_ci


@pytest.fixture(scope="module")
def pieces(tmp_path_factory, generated_tasks, tiny_policy):
    """A tiny untrained π0, a PRM initialised from it, and π0's rollouts on the train games."""
    import torch

    from agentprm.prm.model import ProcessRewardModel

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("stage3")
    policy = tiny_policy
    prm = ProcessRewardModel.init(policy, seed=0).save(root / "prm")
    assert main(["rollout", "--policy", str(policy), "--tasks", str(generated_tasks.train), "--per-task", "1",
                 "--max-steps", "3", "--temperature", "1", "--out", str(root / "rollouts")]) == 0
    return root, policy, prm


def test_train_policy_writes_a_loadable_updated_policy(pieces, tmp_path):
    root, policy, prm = pieces
    out, summary = tmp_path / "pi1", tmp_path / "s.json"
    assert main(["train-policy", "--policy", str(policy), "--prm", str(prm), "--rollouts", str(root / "rollouts"),
                 "--out", str(out), "--steps", "3", "--batch-size", "4", "--samples-per-state", "3",
                 "--json", str(summary)]) == 0
    meta = json.loads((out / "agentprm.json").read_text())["online_dpo"]
    assert meta["reference"] == str(policy) and len(meta["history"]) >= 1 and meta["config"]["beta"] == 0.03
    s = json.loads(summary.read_text())
    assert s["states"] == 18 and s["provenance"]["seed"] == 0     # 6 games × 3 turns, all distinct states
    from agentprm.agent.lm import LMAgent

    assert LMAgent.load(out).name == "pi1"


def test_train_policy_bad_input(pieces, tmp_path, capsys):
    root, policy, _ = pieces
    assert main(["train-policy", "--policy", str(policy), "--prm", str(policy), "--rollouts", str(root / "rollouts"),
                 "--out", str(tmp_path / "x")]) == 2
    assert "not a PRM folder" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_eval_best_of_n_and_beam(pieces, generated_tasks, tmp_path, capsys):
    root, policy, prm = pieces
    base = ["eval", "--policy", str(policy), "--tasks", str(generated_tasks.eval), "--max-steps", "3"]
    out = tmp_path / "bon.json"
    assert main(base + ["--prm", str(prm), "--best-of", "3", "--temperature", "1", "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["episodes"] == 6 and s["policy"] == "pi0+bon3" and s["ci95"] == list(wilson_ci(s["successes"], 6))
    out = tmp_path / "beam.json"
    assert main(base + ["--prm", str(prm), "--beam-width", "2", "--beam-expand", "2", "--temperature", "1",
                        "--json", str(out)]) == 0
    assert json.loads(out.read_text())["episodes"] == 6
    assert main(base + ["--best-of", "3", "--temperature", "1"]) == 2
    assert "--prm" in capsys.readouterr().err
    assert main(base + ["--prm", str(prm), "--best-of", "3"]) == 2
    assert "--temperature" in capsys.readouterr().err


def test_out_never_replaces_a_folder_agentprm_did_not_write(pieces, tmp_path, capsys):
    """--out replaces only an agentprm output (a folder with agentprm.json) or an empty folder: a folder of the
    user's files is refused before any work, and kept as it was."""
    root, policy, prm = pieces
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    train = ["train-policy", "--policy", str(policy), "--prm", str(prm), "--rollouts", str(root / "rollouts"),
             "--steps", "1", "--batch-size", "2", "--out"]
    assert main(train + [str(mine)]) == 2
    assert "did not write" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "mine"
    assert main(["train-prm", "--targets", "nowhere.parquet", "--init", "tiny", "--out", str(mine)]) == 2
    assert "did not write" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    assert main(train + [str(tmp_path / "file")]) == 2 and (tmp_path / "file").read_text() == "x"
    capsys.readouterr()
    out = tmp_path / "pi1"
    assert main(train + [str(out)]) == 0 and main(train + [str(out)]) == 0   # its own output: replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(train + [str(empty)]) == 0 and (empty / "agentprm.json").is_file()


def test_zero_row_rollouts_are_a_one_line_error(pieces, tmp_path, capsys):
    """train-policy on rollouts without a row hung without a word."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentprm.data.trajectories import SCHEMA

    root, policy, prm = pieces
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMA), empty)
    assert main(["train-policy", "--policy", str(policy), "--prm", str(prm), "--rollouts", str(empty),
                 "--out", str(tmp_path / "pi1")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no states" in err and not (tmp_path / "pi1").exists()


def test_eval_with_a_uniform_critic_is_the_seeded_control(pieces, generated_tasks, tmp_path):
    """`--prm uniform`: the same search with seeded random scores in Q's place; the same seed plays the same games."""
    from agentprm.agent.lm import LMAgent
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.search import UniformCritic, play_beam

    _, policy, _ = pieces
    out = tmp_path / "uniform.json"
    assert main(["eval", "--policy", str(policy), "--tasks", str(generated_tasks.eval), "--max-steps", "3",
                 "--prm", "uniform", "--beam-width", "2", "--beam-expand", "2", "--temperature", "1", "--seed", "3",
                 "--workers", "1", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    _, direct = play_beam(load_tasks(generated_tasks.eval), LMAgent.load(policy, temperature=1.0, seed=3),
                          UniformCritic(3), width=2, expand=2, max_steps=3, seed=3, workers=1)
    assert got["search"] == "pi0+beam2x2" and got["episodes"] == 6
    assert got["per_task"] == direct["per_task"] and got["policy_samples"] == direct["policy_samples"]
    assert got["env_steps"] == direct["env_steps"]


def test_the_policy_as_critic_scores_its_own_log_pi(pieces, generated_tasks, tmp_path, capsys):
    """`--prm policy`: Best-of-N ranks the samples by the policy's own log π — for each (state, command) the number
    choose mode's packed scoring of all the state's admissible commands gives it — and plays; the expert/random
    baselines (no model to score with) are one-line errors before any play; beam search with it plays what
    `play_beam` with the policy's own PolicyCritic plays (branches ranked by the log π of their next command)."""
    import torch

    from agentprm.agent.encoding import prompt_ids, reply_ids
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.replay import episode_states
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.search.policy import PolicyCritic

    root, policy, _ = pieces
    critic, agent = PolicyCritic(policy), LMAgent.load(policy, mode="choose")
    states = [s for e in iter_episodes(read_trajectories(root / "rollouts")) for s, _ in episode_states(e)
              if len(s.admissible) > 1][:3]
    assert states
    for state in states:
        commands = list(state.admissible)
        packed = agent.backend.score([prompt_ids(agent.tokenizer, state, agent.prompt_cfg)],
                                     [[reply_ids(agent.tokenizer, c) for c in commands]])[0]
        got = critic.logits([state] * len(commands), commands)
        torch.testing.assert_close(got, packed.double(), atol=1e-5, rtol=0)
        assert got.max() < 0 and torch.equal(critic.score([state] * len(commands), commands).argmax(), got.argmax())
    base = ["eval", "--policy", str(policy), "--tasks", str(generated_tasks.eval), "--max-steps", "2", "--prm",
            "policy", "--temperature", "1", "--workers", "1"]
    out = tmp_path / "bon.json"
    assert main([*base, "--best-of", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["episodes"] == generated_tasks.num
    capsys.readouterr()
    assert main([*base, "--best-of", "2", "--policy", "expert"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'expert' has none" in err
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.search import play_beam

    beam = tmp_path / "beam.json"
    assert main([*base, "--beam-width", "2", "--beam-expand", "2", "--seed", "3", "--json", str(beam)]) == 0
    got = json.loads(beam.read_text())
    own = LMAgent.load(policy, temperature=1.0, seed=3)
    _, direct = play_beam(load_tasks(generated_tasks.eval), own, PolicyCritic(own), width=2, expand=2, max_steps=2,
                          seed=3, workers=1)
    assert got["search"] == "pi0+beam2x2" and got["episodes"] == generated_tasks.num
    assert got["per_task"] == direct["per_task"] and got["prm_scores"] == direct["prm_scores"] > 0
    assert got["env_steps"] == direct["env_steps"]
