"""Sokoban in text (envs/sokoban.py), the second real environment: levels in XSB notation, the rules of
a move, breadth-first solutions, the expert, the generator's splits, task folders through the CLI, and the loop's
pieces (rollouts in env workers, Monte-Carlo targets, replay) on it."""
from __future__ import annotations

import json

import pytest

from agentprm.envs.base import TaskSpec
from agentprm.envs.registry import env_factory, get_env
from agentprm.envs.sokoban import (NOTHING, SokobanEnv, parse_level, render, sokoban_tasks, solve, split_of)
from agentprm.errors import UserError

CORRIDOR = "######|#@ $.#|######"            # two moves: right, right
AROUND = "#####|#.  #|# $ #|#  @#|#####"     # 5 moves at best (up then left, or left then up): the player walks round
CORNERED = "#####|#$  #|#  .#|# @ #|#####"   # the box is in a corner that is not a target: no solution


def test_a_level_round_trips_through_its_xsb_text_and_bad_ones_are_refused():
    for text in (CORRIDOR, AROUND, "######|#+*$ #|######"):
        assert parse_level(text).text() == text
    level = parse_level("######|#+*$ #|######")
    assert level.player == (1, 1) and level.boxes == {(1, 2), (1, 3)} and level.targets == {(1, 1), (1, 2)}
    assert parse_level(CORRIDOR.replace("|", "\n")) == parse_level(CORRIDOR)
    with pytest.raises(UserError, match="unknown cell 'x'"):
        parse_level("#####|#@x.#|#####")
    with pytest.raises(UserError, match=r"found 2 player\(s\), 1 box\(es\), 1 target"):
        parse_level("######|#@@$.#|######")
    with pytest.raises(UserError, match=r"found 1 player\(s\), 2 box\(es\), 1 target"):
        parse_level("######|#@$$.#|######")


def test_moves_push_one_box_and_a_blocked_move_changes_nothing():
    env = SokobanEnv(parse_level("########|#@ $$..#|########"), max_steps=10)
    start = env.reset()
    assert start.admissible == ("right",) and start.task == "Push the 2 boxes onto the 2 targets."
    assert start.observation == ("Boxes: 2 right; 3 right\nTargets: 4 right; 5 right\n"
                                 "# # # # # # # #\n# @ _ $ $ . . #\n# # # # # # # #")
    moved = env.step("right")
    assert moved.observation.split("\n")[:4] == ["Boxes: 1 right; 2 right", "Targets: 3 right; 4 right",
                                                  "# # # # # # # #", "# _ @ $ $ . . #"]
    assert moved.info["admissible_action"]
    assert moved.admissible == ("left",)                  # two boxes in a row cannot be pushed
    blocked = env.step("right")
    assert blocked.observation == f"{NOTHING}\n{moved.observation}" and not blocked.info["admissible_action"]
    assert env.step("jump").observation.startswith(NOTHING)   # not a move at all: answered, never raised
    assert env.turns == 3 and not blocked.done


def test_breadth_first_search_finds_a_shortest_solution_and_no_solution_for_a_dead_box():
    assert solve(parse_level(CORRIDOR)) == ["right", "right"]
    plan = solve(parse_level(AROUND))
    assert len(plan) == 5 and plan in (["left", "up", "right", "up", "left"], ["up", "left", "down", "left", "up"])
    env = SokobanEnv(parse_level(AROUND), max_steps=20)
    env.reset()
    turns = [env.step(a) for a in plan]
    assert turns[-1].won and turns[-1].done and turns[-1].reward == 1.0 and [t.reward for t in turns[:-1]] == [0.0] * 4
    assert solve(parse_level(CORNERED)) is None
    assert solve(parse_level(CORRIDOR), limit=1) is None   # the search stops at its state limit


def test_the_expert_follows_a_shortest_plan_and_replans_after_a_detour():
    env = SokobanEnv(parse_level(AROUND), max_steps=20, expert=True)
    turn = env.reset()
    assert turn.info["expert_action"] == solve(parse_level(AROUND))[0]
    detour = env.step("down" if "down" in turn.admissible else "left")
    replanned = solve(env.level, env.boxes, env.player)
    assert detour.info["expert_action"] == replanned[0]
    steps = 0
    while not turn.done:
        turn = env.step((turn if steps else detour).info["expert_action"])
        steps += 1
    assert turn.won and steps == len(replanned)
    dead = SokobanEnv(parse_level(CORNERED), max_steps=5, expert=True)
    assert "expert_action" not in dead.reset().info   # nothing to follow from a lost state


def test_generated_levels_are_seeded_solvable_distinct_and_never_shared_between_splits():
    train = sokoban_tasks("train", 60, seed=0)
    evals = sokoban_tasks("eval", 30, seed=0)
    assert [t.game for t in sokoban_tasks("train", 60, seed=0)] == [t.game for t in train]
    assert [t.game for t in sokoban_tasks("train", 60, seed=1)] != [t.game for t in train]
    assert [t.task_type for t in train[:4]] == ["boxes-1", "boxes-2", "boxes-1", "boxes-2"]
    assert not {t.game for t in train} & {t.game for t in evals}
    assert len({t.game for t in train}) == 60 and len({t.task_id for t in train}) == 60
    for t in train + evals:
        level = parse_level(t.game)
        assert split_of(level) == t.split and t.env == "sokoban"
        assert len(level.boxes) == int(t.task_type.split("-")[1])
        assert len(solve(level)) == t.walkthrough_len and 4 <= t.walkthrough_len <= 20
    three = sokoban_tasks("train", 2, seed=0, types=["boxes-3"], room=6)
    assert all(len(parse_level(t.game).boxes) == 3 for t in three)
    with pytest.raises(UserError, match="task type 'boxes-9'"):
        sokoban_tasks("train", 1, types=["boxes-9"])
    with pytest.raises(UserError, match="split 'test'"):
        sokoban_tasks("test", 1)


def test_a_task_folder_comes_from_the_cli_and_loads_through_load_tasks(tmp_path, capsys):
    from agentprm.cli import main
    from agentprm.envs.alfworld.tasks import load_tasks

    out = tmp_path / "levels"
    assert main(["tasks", "generate", "--env", "sokoban", "--split", "eval", "--num", "8", "--seed", "2",
                 "--types", "boxes-2", "--out", str(out)]) == 0
    loaded = load_tasks(out)
    assert loaded == sokoban_tasks("eval", 8, seed=2, types=["boxes-2"])
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert rows[0]["env"] == "sokoban" and rows[0]["game"] == loaded[0].game   # a level string, not a path
    assert main(["tasks", "generate", "--env", "sokoban", "--split", "eval", "--num", "8", "--out", str(out)]) == 2
    assert "tasks.jsonl already exists; choose another --out or pass --force" in capsys.readouterr().err
    assert main(["tasks", "generate", "--env", "sokoban", "--split", "eval", "--num", "3", "--out", str(out),
                 "--force"]) == 0 and len(load_tasks(out)) == 3
    mine = tmp_path / "mine"                  # a folder the user wrote is never replaced, --force or not
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["tasks", "generate", "--env", "sokoban", "--split", "eval", "--num", "3", "--out", str(mine),
                 "--force"]) == 2
    assert "refusing to replace it" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "keep"


def test_the_expert_wins_every_level_in_env_workers_and_targets_discount_the_win(tmp_path):
    from agentprm.agent.policies import ExpertAgent
    from agentprm.data.trajectories import ShardWriter
    from agentprm.rollout.play import play_tasks
    from agentprm.targets.mc import targets_from_rollouts

    tasks = sokoban_tasks("train", 6, seed=3)
    with ShardWriter(tmp_path / "demos") as writer:
        episodes, summary = play_tasks(ExpertAgent(), tasks, per_task=1, seed=0, max_steps=30, tag="expert",
                                       workers=2, writer=writer, progress=False)
    assert summary["success_rate"] == 1.0
    by_task = {t.task_id: t for t in tasks}
    assert all(len(e.steps) == by_task[e.task_id].walkthrough_len for e in episodes)
    q = targets_from_rollouts(tmp_path / "demos", gamma=0.9).table.to_pydict()
    for turn, value, eid in zip(q["turn"], q["q"], q["episode_id"]):
        n = len(next(e for e in episodes if e.episode_id == eid).steps)
        assert value == pytest.approx(0.9 ** (n - 1 - turn))   # the one reward, at the last move


def test_levels_replay_to_the_same_state_through_the_registry():
    assert get_env("sokoban").replayable
    task = TaskSpec("t", "boxes-1", AROUND, env="sokoban")
    moves = ["up", "left", "left", "up", "right", "down", "left"]
    first, second = env_factory(task, max_steps=10)(), env_factory(task, max_steps=10)()
    a = [first.reset()] + [first.step(m) for m in moves]
    b = [second.reset()] + [second.step(m) for m in moves]
    assert [(t.observation, t.admissible, t.reward) for t in a] == [(t.observation, t.admissible, t.reward) for t in b]
    level = parse_level(AROUND)
    assert a[0].observation == render(level, level.boxes, level.player)


def test_the_whole_loop_runs_on_sokoban_from_a_config(tmp_path):
    """the second environment through every stage of one AgentPRM iteration — generated levels, π0 trained
    from the expert's demos of a larger pool of train levels (`policy0.demo_tasks`), rollouts, targets, the PRM,
    online DPO, and the evals with Best-of-N and beam search beside their uniform-critic controls."""
    from conftest import run_mini_loop

    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.envs.alfworld.tasks import load_tasks

    run, rows = run_mini_loop(tmp_path, {
        "seed": 0, "iterations": 1, "tasks": {"env": "sokoban", "train": 3, "eval": 4},
        "policy0": {"retrain": True, "demo_tasks": 8,
                    "sft": {"steps": 20, "renumber_copies": 0, "prompt": {"format": "turns", "history_turns": 0}}},
        "rollout": {"per_task": 2, "max_steps": 5, "num_envs": 4, "workers": 2},
        "prm": {"epochs": 1}, "policy": {"steps": 2, "batch_size": 4},
        "eval": {"max_steps": 5, "best_of_n": [2], "beam_expand": 1}})
    train, pool = load_tasks(run / "tasks" / "train"), load_tasks(run / "tasks" / "demos")
    assert len(pool) == 8 and pool[:3] == train and {t.env for t in pool} == {"sokoban"}   # the loop's levels first
    demos = list(iter_episodes(read_trajectories(run / "demos_policy0.parquet")))
    assert len(demos) == 8 and all(e.won for e in demos)
    assert json.loads((run / "policy_0" / "agentprm.json").read_text())["prompt"]["format"] == "turns"
    rollouts = list(iter_episodes(read_trajectories(run / "iter_1" / "rollouts")))
    assert len(rollouts) == 6 and all(s.action in ("up", "down", "left", "right") for e in rollouts for s in e.steps)
    assert all(r["episodes"] == 4 and r["mean_return"] == r["success_rate"] for r in rows)   # reward: the solve

    # scripts/sokoban_dead_ends.py labels every move of greedy π1's eval episodes with the solver and scores it by Q1
    dead_ends = _script("sokoban_dead_ends")
    dead_ends.main(["--runs", str(run), "--boot", "20", "--json", str(tmp_path / "dead.json")])
    found = json.loads((tmp_path / "dead.json").read_text())["pooled"]
    steps = sum(len(e.steps) for e in iter_episodes(read_trajectories(run / "evals" / "pi1.parquet")))
    assert found["solvable"] + found["lost"] == steps and found["safe"] + found["fatal"] == found["solvable"]


def _script(name: str):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dead_end_auc_counts_ties_half_and_matches_every_pair():
    from agentprm.prm.metrics import auc

    assert auc([0.9, 0.5, 0.3], [0.4, 0.5]) == pytest.approx(3.5 / 6)     # pairs by hand: 1, 1, 1, ½, 0, 0
    assert auc([1.0, 2.0], [0.0]) == 1.0 and auc([0.0], [1.0, 2.0]) == 0.0 and auc([1.0], [1.0]) == 0.5
