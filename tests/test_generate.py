"""The ALFWorld game generator: determinism, solvability, split hygiene, CLI errors, official-layout loading."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from agentprm.cli import main
from agentprm.envs.alfworld import generate as gen
from agentprm.envs.alfworld.engine import GAME_FILE, TRAJ_FILE, AlfWorldEnv
from agentprm.envs.alfworld.setup import TASK_TYPES
from agentprm.envs.alfworld.tasks import MANIFEST, load_tasks
from agentprm.errors import UserError
from agentprm.outputs import OWNER_FILE


def manifest_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / MANIFEST).read_text().splitlines()]


def game_bytes(folder: Path) -> dict[str, bytes]:
    return {f"{row['game']}/{name}": (folder / row["game"] / name).read_bytes()
            for row in manifest_rows(folder) for name in (GAME_FILE, TRAJ_FILE)}


def test_same_seed_gives_same_games_with_parallel_workers(generated_tasks, tmp_path, monkeypatch):
    # Spawned workers run with their own hash seeds, so this also catches iteration over unsorted sets.
    monkeypatch.setenv("AGENTPRM_GAME_CACHE", "off")   # generated again, not copied from the fixture's cache
    gen.generate_tasks(tmp_path, "eval", generated_tasks.num, generated_tasks.seed, workers=2, progress=False)
    assert manifest_rows(tmp_path) == manifest_rows(generated_tasks.eval)
    assert game_bytes(tmp_path) == game_bytes(generated_tasks.eval)


def test_cached_games_are_copied_and_a_split_is_a_prefix_of_a_larger_one(generated_tasks, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTPRM_GAME_CACHE", str(tmp_path / "cache"))
    gen.generate_tasks(tmp_path / "a", "eval", 3, generated_tasks.seed, progress=False)   # fills the cache
    made = []
    real = gen.make_game
    monkeypatch.setattr(gen, "make_game", lambda job, out: made.append(job.index) or real(job, out))
    gen.generate_tasks(tmp_path / "b", "eval", 4, generated_tasks.seed, progress=False)
    assert made == [3]                               # games 0-2 came from the cache, only game 3 was generated
    expected = manifest_rows(generated_tasks.eval)[:4]
    assert [{k: v for k, v in r.items()} for r in manifest_rows(tmp_path / "b")] == expected
    assert game_bytes(tmp_path / "b") == {k: v for k, v in game_bytes(generated_tasks.eval).items()
                                          if any(k.startswith(r["game"]) for r in expected)}
    entry = next(p for p in (tmp_path / "cache").glob("*/eval-s0-00001-*"))
    (entry / "task.json").write_text("{not json")    # a corrupt entry is a miss: regenerated, then rewritten
    made.clear()
    gen.generate_tasks(tmp_path / "c", "eval", 2, generated_tasks.seed, progress=False)
    assert made == [1] and manifest_rows(tmp_path / "c") == expected[:2]
    assert json.loads((entry / "task.json").read_text())["task_id"] == expected[1]["task_id"]


def test_a_cache_entry_naming_a_path_outside_the_output_is_a_miss(generated_tasks, tmp_path, monkeypatch):
    """A cache entry is data from outside: its task id names the folder written under the output, so an id that is
    not the job's own game name (`../victim`) is ignored and the game generated again; nothing beside the output is
    touched."""
    monkeypatch.setenv("AGENTPRM_GAME_CACHE", str(tmp_path / "cache"))
    gen.generate_tasks(tmp_path / "a", "eval", 1, generated_tasks.seed, progress=False)   # fills the cache
    entry = next((tmp_path / "cache").glob("*/eval-s0-00000-*"))
    spec = json.loads((entry / "task.json").read_text())
    for poison in ("../victim", "/tmp/victim", "eval-00000-x/../../victim", ""):
        (entry / "task.json").write_text(json.dumps({**spec, "task_id": poison}))
        if poison and "/" not in poison[:1]:
            (entry / poison).mkdir(parents=True, exist_ok=True)
            for f in (entry / spec["task_id"]).iterdir():
                (entry / poison / f.name).write_bytes(f.read_bytes())
        (tmp_path / "victim").mkdir(exist_ok=True)
        (tmp_path / "victim" / "mine.txt").write_text("keep")
        out = tmp_path / f"out-{len(poison)}"
        gen.generate_tasks(out, "eval", 1, generated_tasks.seed, progress=False)
        assert (tmp_path / "victim" / "mine.txt").read_text() == "keep" and sorted(
            p.name for p in (tmp_path / "victim").iterdir()) == ["mine.txt"]
        assert manifest_rows(out) == manifest_rows(generated_tasks.eval)[:1]


def test_different_seed_gives_different_games(generated_tasks):
    rows = manifest_rows(generated_tasks.train)
    for row in rows:
        job = gen.GameJob(generated_tasks.seed + 1, "train", int(row["task_id"].split("-")[1]), row["task_type"])
        other = gen.draft_game(job, attempt=0)
        assert other.name != row["task_id"]
        assert other.game["pddl_problem"] != json.loads((generated_tasks.train / row["game"] / GAME_FILE).read_text())[
            "pddl_problem"]


def test_every_type_is_present_and_its_walkthrough_wins(generated_tasks):
    tasks = load_tasks(generated_tasks.train)
    assert [t.task_type for t in tasks] == list(TASK_TYPES)
    for task in tasks:
        game = json.loads((Path(task.game) / GAME_FILE).read_text())
        assert game["solvable"] is True and len(game["walkthrough"]) == task.walkthrough_len
        env = AlfWorldEnv(task.game, max_steps=100)
        turn = env.reset()
        assert not turn.won and turn.task == task.goal
        for command in game["walkthrough"]:
            assert command in turn.admissible, (task.task_id, command)
            turn = env.step(command)
        env.close()
        assert turn.won, task.task_id


def test_traj_data_matches_the_manifest(generated_tasks):
    for task in load_tasks(generated_tasks.eval):
        traj = json.loads((Path(task.game) / TRAJ_FILE).read_text())
        params = traj["pddl_params"]
        assert traj["task_type"] == task.task_type and traj["scene"]["floor_plan"] == f"FloorPlan{task.floorplan}"
        assert set(params) == {"object_target", "parent_target", "toggle_target", "mrecep_target", "object_sliced"}
        assert params["object_target"].lower() in task.goal
        assert (params["toggle_target"] == "DeskLamp") == (task.task_type == "look_at_obj_in_light")


def test_train_and_eval_floorplans_are_disjoint(generated_tasks):
    train = {t.floorplan for t in load_tasks(generated_tasks.train)}
    evaluation = {t.floorplan for t in load_tasks(generated_tasks.eval)}
    assert train and evaluation and not train & evaluation
    for task_type in TASK_TYPES:  # the fixed assignment leaves every type playable in both splits
        train_plans = set(gen.candidate_floorplans("train", task_type))
        eval_plans = set(gen.candidate_floorplans("eval", task_type))
        assert train_plans and eval_plans and not train_plans & eval_plans


def test_cli_types_filter_force_and_summary(tmp_path, capsys):
    """--force replaces a task folder agentprm generated (and only that)."""
    out, summary = tmp_path / "games", tmp_path / "summary.json"
    assert main(["tasks", "generate", "--out", str(out), "--split", "train", "--num", "1", "--seed", "4"]) == 0
    first = {t.task_id for t in load_tasks(out)}
    assert main(["tasks", "generate", "--out", str(out), "--split", "train", "--num", "1", "--seed", "3"]) == 2
    assert "--force" in capsys.readouterr().err and {t.task_id for t in load_tasks(out)} == first
    types = ["pick_heat_then_place_in_recep", "look_at_obj_in_light"]
    assert main(["tasks", "generate", "--out", str(out), "--split", "train", "--num", "2", "--seed", "3",
                 "--types", *types, "--force", "--json", str(summary)]) == 0
    report = json.loads(summary.read_text())
    assert report["games"] == 2 and report["by_type"] == {t: 1 for t in types}
    assert report["failures"] == 0 and report["seconds"] > 0 and report["provenance"]["seed"] == 3
    assert sorted(t.task_type for t in load_tasks(out)) == sorted(types)
    assert not first & {p.name for p in out.iterdir()}   # the old games went with the folder they came in


@pytest.mark.parametrize("extra, field", [
    (["--types", "pick_and_juggle"], "--types"),
    (["--num", "0"], "--num"),
])
def test_cli_rejects_bad_flags_in_one_line(tmp_path, capsys, extra, field):
    args = ["tasks", "generate", "--out", str(tmp_path / "x"), "--split", "train", "--num", "1", *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and field in err
    assert not (tmp_path / "x").exists()


def test_a_request_the_disk_cannot_hold_is_refused_before_work(tmp_path, capsys, monkeypatch):
    """`--num 1000000` (~100 GB of games) on a disk with 1 GB free is one line naming the space needed, and nothing is
    written; `--num 2000000000` is out of the flag's range before that."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2 * 10**9, 10**9, 10**9))
    out = tmp_path / "new" / "games"
    assert main(["tasks", "generate", "--out", str(out), "--split", "train", "--num", "1000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "1000000 games need about 100.0 GB" in err and str(tmp_path) in err
    assert main(["tasks", "generate", "--out", str(out), "--split", "train", "--num", "2000000000"]) == 2
    assert "--num must be in [1, 1e+06]" in capsys.readouterr().err
    assert not out.exists() and [p for p in tmp_path.rglob("*") if not p.is_dir()] == []


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_cli_never_replaces_a_folder_it_did_not_generate(tmp_path, capsys, force):
    """A hand-written tasks.jsonl, and a user's sub-folder named like the game that would be generated, are kept:
    even --force replaces only a task folder agentprm generated."""
    name = gen.draft_game(gen.GameJob(0, "eval", 0, gen.TASK_TYPES[0]), attempt=0).name
    (tmp_path / MANIFEST).write_text("keep me\n")
    (tmp_path / name).mkdir()
    (tmp_path / name / "notes.txt").write_text("mine")
    assert main(["tasks", "generate", "--out", str(tmp_path), "--split", "eval", "--num", "1", *force]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did not write" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([MANIFEST, name])
    assert (tmp_path / MANIFEST).read_text() == "keep me\n" and (tmp_path / name / "notes.txt").read_text() == "mine"


def test_failed_game_is_regenerated_and_counted(tmp_path, monkeypatch):
    real_replay, calls = gen.replay, []

    def fail_first(folder, commands):
        calls.append(folder)
        return ("forced failure", "") if len(calls) == 1 else real_replay(folder, commands)

    monkeypatch.setattr(gen, "replay", fail_first)
    result = gen.generate(tmp_path, "train", 1, 5, types=["pick_and_place_simple"], progress=False)
    first_try = gen.draft_game(gen.GameJob(5, "train", 0, "pick_and_place_simple"), attempt=0).name
    assert len(result.failures) == 1 and result.failures[0].startswith(first_try)
    assert result.tasks[0].task_id != first_try
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([MANIFEST, OWNER_FILE, result.tasks[0].task_id])


def test_official_layout_is_served(generated_tasks, tmp_path, capsys):
    split_dir = tmp_path / "json_2.1.1" / "train"
    manifest = {t.task_id: t for t in load_tasks(generated_tasks.train)}
    for n, task in enumerate(manifest.values()):
        trial = split_dir / f"{task.task_type}-{n}" / f"trial_T2019_{n}"
        trial.mkdir(parents=True)
        for name in (GAME_FILE, TRAJ_FILE):
            shutil.copy(Path(task.game) / name, trial / name)
    official = load_tasks(tmp_path)
    assert len(official) == len(manifest) and {t.split for t in official} == {"train"}
    by_type = {t.task_type: t for t in manifest.values()}
    for task in official:
        assert task.floorplan == by_type[task.task_type].floorplan
    env = AlfWorldEnv(official[0].game)
    turn = env.reset()
    env.close()
    assert turn.task == by_type[official[0].task_type].goal and turn.admissible
    assert main(["tasks", "list", "--tasks", str(tmp_path)]) == 0
    assert "pick_two_obj_and_place" in capsys.readouterr().out


@pytest.mark.parametrize("edit, message", [
    (lambda row, outside: {**row, "game": "../" + Path(row["game"]).name}, "outside the tasks folder"),
    (lambda row, outside: {**row, "game": str(outside)}, "outside the tasks folder"),
    (lambda row, outside: {**row, "game": "."}, "outside the tasks folder"),
    (lambda row, outside: {**row, "game": "no-such-game"}, "no game folder"),
    (lambda row, outside: {**row, "game": 3}, "field 'game' must be a string, got 3"),
    (lambda row, outside: {**row, "floorplan": "12"}, "field 'floorplan' must be an integer, got '12'"),
    (lambda row, outside: {**row, "seed": True}, "field 'seed' must be an integer, got True"),
    (lambda row, outside: {**row, "goal": ["x"]}, "field 'goal' must be a string"),
    (lambda row, outside: {**row, "game": "link"}, r"outside the tasks folder \(through a symbolic link\)"),
])
def test_manifest_paths_stay_inside_the_tasks_folder(tmp_path, generated_tasks, edit, message):
    """A manifest names games inside its own folder: `../`, absolute paths and missing folders are refused (issue
    17: a game is data of the tasks folder, never a path to elsewhere)."""
    folder = tmp_path / "tasks"
    shutil.copytree(generated_tasks.train, folder)
    rows = manifest_rows(folder)
    os.symlink(generated_tasks.eval.resolve() / manifest_rows(generated_tasks.eval)[0]["game"], folder / "link")
    rows[1] = edit(rows[1], generated_tasks.eval.resolve() / Path(rows[1]["game"]).name)
    (folder / MANIFEST).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=f"{MANIFEST}:2: .*{message}"):
        load_tasks(folder)


def test_manifest_refuses_a_repeated_task_id(tmp_path, generated_tasks):
    folder = tmp_path / "tasks"
    shutil.copytree(generated_tasks.train, folder)
    rows = manifest_rows(folder)
    rows[2]["task_id"] = rows[0]["task_id"]
    (folder / MANIFEST).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=f"{MANIFEST}:3: field 'task_id' .* is repeated"):
        load_tasks(folder)
    assert len(load_tasks(generated_tasks.train)) == len(rows)      # the intact folder still loads


def test_a_task_folder_whose_name_has_a_dollar_is_found_as_named(generated_tasks, tmp_path, monkeypatch):
    """`--tasks` expanded $VARS, so a real folder named "$HOME dollar" was not found; a config's
    "$ALFWORLD_DATA/..." still expands when no folder has the literal name."""
    folder = tmp_path / "$HOME dollar"
    shutil.copytree(generated_tasks.eval, folder)
    assert len(load_tasks(folder)) == len(load_tasks(generated_tasks.eval))
    monkeypatch.setenv("AGENTPRM_TEST_TASKS", str(generated_tasks.eval))
    assert len(load_tasks("$AGENTPRM_TEST_TASKS")) == len(load_tasks(generated_tasks.eval))
