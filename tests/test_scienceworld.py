"""ScienceWorld through the env registry (envs/scienceworld.py): its splits, the gold path played by the expert in
env worker processes, rewards and success, replay determinism, and MC targets from its episodes. Needs the
`scienceworld` package and Java: skipped where either is missing, except where AGENTPRM_REQUIRE_SCIENCEWORLD=1
(.ci/run, after `make java`)."""
from __future__ import annotations

import os
import shutil

import pytest

from agentprm.agent.policies import ExpertAgent, RandomAgent
from agentprm.envs.registry import env_factory
from agentprm.errors import UserError

if os.environ.get("AGENTPRM_REQUIRE_SCIENCEWORLD") != "1":
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime (make java)", allow_module_level=True)

from agentprm.envs.scienceworld import parse_game, scienceworld_tasks  # noqa: E402

SHORT = ["find-living-thing", "find-non-living-thing"]   # gold paths of ~10 commands


@pytest.fixture(scope="module")
def tasks():
    return scienceworld_tasks("train", 2, seed=0, task_names=SHORT)


def test_splits_spread_over_types_and_never_share_a_variation():
    train = scienceworld_tasks("train", 90, seed=0)
    test = scienceworld_tasks("test", 90, seed=0)
    assert len({t.task_type for t in train[:30]}) == 30          # every type once before any type twice
    assert {t.env for t in train} == {"scienceworld"} and all(t.split == "train" for t in train)
    assert not {t.game for t in train} & {t.game for t in test}
    assert [t.task_id for t in scienceworld_tasks("train", 90, seed=0)] == [t.task_id for t in train]
    assert [t.task_id for t in scienceworld_tasks("train", 90, seed=1)] != [t.task_id for t in train]
    assert parse_game(train[0].game)[2] == "easy" and len({t.task_id for t in train}) == 90
    with pytest.raises(UserError, match="split 'valid'"):
        scienceworld_tasks("valid", 1)
    with pytest.raises(UserError, match="not a task name"):
        scienceworld_tasks("train", 1, task_names=["boil-water-quickly"])
    with pytest.raises(UserError, match="expected '<task name>/<variation>"):
        parse_game("boil")


def test_a_task_folder_round_trips_through_the_cli_the_registry_and_load_tasks(tmp_path, capsys):
    import json

    from agentprm.cli import main
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.envs.registry import task_generator

    out = tmp_path / "sw-train"
    assert main(["tasks", "generate", "--env", "scienceworld", "--split", "train", "--num", "6", "--seed", "3",
                 "--types", *SHORT, "--out", str(out), "--json", str(tmp_path / "s.json")]) == 0
    loaded = load_tasks(out)
    made = [t.__class__(**{**t.__dict__, "seed": 3}) for t in scienceworld_tasks("train", 6, seed=3, task_names=SHORT)]
    assert loaded == made and {t.env for t in loaded} == {"scienceworld"}
    assert json.loads((tmp_path / "s.json").read_text())["by_type"] == {SHORT[0]: 3, SHORT[1]: 3}
    assert [t.task_type for t in load_tasks(out, [SHORT[1]])] == [SHORT[1]] * 3
    with pytest.raises(UserError, match=f"unknown task type 'boil'; known: {SHORT[0]}, {SHORT[1]}"):
        load_tasks(out, ["boil"])
    before = (out / "tasks.jsonl").read_bytes()
    assert main(["tasks", "generate", "--env", "scienceworld", "--split", "train", "--num", "2", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and (out / "tasks.jsonl").read_bytes() == before
    # the loop's "eval" split is ScienceWorld's test split; the registry hands the loop this same generator
    held = task_generator("scienceworld")(tmp_path / "sw-eval", "eval", 4, 0, SHORT)
    assert {t.split for t in held} == {"test"} and load_tasks(tmp_path / "sw-eval") == held
    with pytest.raises(UserError, match="--num 999: ScienceWorld's train split has"):
        task_generator("scienceworld")(tmp_path / "sw-big", "train", 999, 0, SHORT[:1])
    assert not (tmp_path / "sw-big").exists()
    assert main(["tasks", "generate", "--env", "textworld-cooking", "--split", "train", "--num", "1",
                 "--out", str(tmp_path / "x")]) == 2
    assert "--env 'textworld-cooking': not a registered environment" in capsys.readouterr().err


@pytest.mark.slow
def test_the_expert_plays_the_gold_path_to_a_win_in_env_workers(tasks, tmp_path):
    from agentprm.data.trajectories import ShardWriter, iter_episodes, read_trajectories
    from agentprm.rollout.play import play_tasks
    from agentprm.targets.mc import targets_from_rollouts

    with ShardWriter(tmp_path / "demos") as writer:
        episodes, summary = play_tasks(ExpertAgent(), tasks, per_task=1, seed=0, max_steps=40, tag="gold",
                                       workers=2, writer=writer, progress=False)
    assert summary["success_rate"] == 1.0 and not any(e.error for e in episodes)
    for e in episodes:
        assert e.won and e.task_type in SHORT and 5 <= len(e.steps) <= 20
        assert sum(s.reward for s in e.steps) == pytest.approx(1.0)   # score 0 -> 100 in partial credits
        assert " is called the " in e.steps[0].observation.split("\n")[0]   # the room it starts in
        assert len(e.steps[0].admissible) > 100
    stored = {e.episode_id: e for e in iter_episodes(read_trajectories(tmp_path / "demos"))}
    assert {e.episode_id for e in episodes} == set(stored)
    q = targets_from_rollouts(tmp_path / "demos", gamma=0.9).table.to_pydict()
    for e in episodes:   # one episode per task: Q̂ of turn t is Σ_k γ^(k−t) r_k over ScienceWorld's partial credits
        got = sorted((turn, value) for turn, value, eid in zip(q["turn"], q["q"], q["episode_id"]) if eid == e.episode_id)
        want = [sum(0.9 ** (k - t) * s.reward for k, s in enumerate(e.steps) if k >= t) for t, _ in got]
        assert [t for t, _ in got] == list(range(len(e.steps))) and [v for _, v in got] == pytest.approx(want)


def test_commands_replay_to_the_same_state_and_unknown_ones_are_answered(tasks):
    agent, make = RandomAgent(3), env_factory(tasks[0], max_steps=6)
    env = make()
    turns = [env.reset()]
    bad = env.step("fly to the moon")
    assert not bad.info["admissible_action"] and bad.observation.startswith("No known action") and not bad.done
    env.reset()
    commands = []
    while not turns[-1].done:
        commands.append(agent.act([None], [turns[-1]])[0])
        turns.append(env.step(commands[-1]))
    env.close()
    assert len(commands) == 6 and turns[-1].info.get("truncated") and not turns[-1].won
    again = make()
    replayed = [again.reset()] + [again.step(c) for c in commands]
    again.close()
    assert [(t.observation, t.admissible, t.reward) for t in replayed] == [(t.observation, t.admissible, t.reward)
                                                                          for t in turns]


def test_an_expert_episode_ends_where_its_gold_path_ends_or_is_left(tasks):
    """Some gold paths stop short of a score of 100; the expert then has no command to give, and its episode ends
    (not won) instead of the expert failing on a missing action."""
    env = env_factory(tasks[0], max_steps=40, expert=True)()
    first = env.reset()
    gold = list(env._gold)
    assert first.info["expert_action"] == gold[0] and len(gold) > 3
    env._gold = gold[:2]                                     # a gold path that ends before the task is done
    mid = env.step(gold[0])
    assert not mid.done and mid.info["expert_action"] == gold[1]
    end = env.step(gold[1])
    assert end.done and end.info["expert_exhausted"] and not end.won and "expert_action" not in end.info
    env.reset()
    off = env.step("look around" if gold[0] != "look around" else "inventory")   # leaving the gold path
    assert off.done and off.info["expert_exhausted"] and not off.won
    env.close()


def test_a_vm_that_died_is_replaced_not_reused(tasks):
    """A Java VM that dies (py4j: "Answer from Java side is empty") fails only the episode it died in: the env's
    next reset, and the next env of the process, get a new VM instead of the dead one."""
    from py4j.protocol import Py4JError

    from agentprm.envs import scienceworld as sw

    env = sw.ScienceWorldTextEnv(tasks[0], max_steps=10)
    first = env.reset()
    dead = env._vm
    dead._gateway.java_process.kill()
    dead._gateway.java_process.wait()
    with pytest.raises(Py4JError):
        env.step(first.admissible[0])
    assert env._vm is None                                       # dropped, not kept for the next reset
    again = env.reset()
    assert env._vm is not dead and again.observation == first.observation
    idle = env._vm
    env.close()
    assert sw._IDLE[-1] is idle                                  # a live VM is kept for the next env
    idle._gateway.java_process.kill()                            # ... and dies while idle
    idle._gateway.java_process.wait()
    other = sw.ScienceWorldTextEnv(tasks[1], max_steps=10)
    assert other.reset().task and other._vm is not idle and idle not in sw._IDLE
    other.close()


@pytest.mark.slow
def test_the_whole_loop_runs_on_scienceworld_from_a_config(tmp_path):
    """ScienceWorld through every stage of one AgentPRM iteration at miniature size — task folders from its
    own splits, π0 SFT'd on gold-path demos, rollouts, targets from partial credit, the PRM, online DPO, and the evals
    with Best-of-N and beam search beside their uniform-critic controls; the rows carry the mean return (partial
    credit) beside success."""
    from conftest import run_mini_loop

    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.eval.play import EvalRow

    run, rows = run_mini_loop(tmp_path, {
        "seed": 0, "iterations": 1, "tasks": {"env": "scienceworld", "train": 2, "eval": 2, "types": SHORT},
        "policy0": {"retrain": True, "sft": {"steps": 10, "renumber_copies": 0, "prompt": {"format": "plain"}}},
        "rollout": {"per_task": 2, "max_steps": 4, "num_envs": 4, "workers": 2},
        "prm": {"epochs": 1}, "policy": {"steps": 2, "batch_size": 4},
        "eval": {"max_steps": 4, "best_of_n": [2], "beam_expand": 1}})
    rollouts = list(iter_episodes(read_trajectories(run / "iter_1" / "rollouts")))
    assert len(rollouts) == 4 and {e.task_type for e in rollouts} <= set(SHORT)
    for r in rows:   # the mean return is the partial credit the row's kept episodes earned
        stage = EvalRow(r["policy"], r["iteration"], r["best_of_n"], r.get("search", "")).stage
        kept = list(iter_episodes(read_trajectories(run / "evals" / f"{stage}.parquet")))
        assert r["episodes"] == len(kept) == 2
        assert r["mean_return"] == pytest.approx(sum(s.reward for e in kept for s in e.steps) / 2)
