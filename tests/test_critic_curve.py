"""A miniature of the large-regime pipeline, run as a user runs the study: scripts/critic_curve.py on
generated (and cached) tasks, π0's rollouts written as shards into one folder that grows, MC targets of a nested
subset, a PRM trained from them and scored against the Monte-Carlo oracle on held-out games — then extended by a
second run that adds rollouts per game without touching what the first one wrote."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from agentprm.agent.state import AgentState

from agentprm.envs.alfworld.tasks import load_tasks

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "critic_curve.py"
_spec = importlib.util.spec_from_file_location("critic_curve", SCRIPT)
curve_script = sys.modules["critic_curve"] = importlib.util.module_from_spec(_spec)   # (its dataclasses look it up)
_spec.loader.exec_module(curve_script)
PAIR_KINDS = curve_script.PAIR_KINDS


def _run(out: Path, *args: str) -> None:
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--seeds", "0", "--states", "12", "--eval-tasks", "4",
           "--variants", "soft-bce", "--workers", "2", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]


def _episodes(folder: Path) -> set[str]:
    return {e for p in folder.glob("*.parquet") for e in pq.read_table(p, columns=["episode_id"])["episode_id"]
            .to_pylist()}


def test_score_refuses_a_folder_that_is_not_a_prm_before_any_work(tmp_path):
    from agentprm.loop.run import DEFAULT_POLICY

    for folder, why in ((DEFAULT_POLICY, "not a PRM folder"), (tmp_path / "missing", "no such PRM folder")):
        done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--score", str(folder)],
                              capture_output=True, text=True, timeout=120, env=os.environ)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1 and lines[0].startswith(f"--score: {folder}: {why}")
        assert not (tmp_path / "out").exists()   # refused before the held-out set was begun


@pytest.mark.slow
def test_the_curve_study_nests_its_points_and_resumes(tmp_path):
    out = tmp_path / "curve"
    _run(out, "--tasks", "3", "6", "--per-task", "2")
    first = {p.name: p.stat().st_mtime_ns for p in (out / "rollouts").glob("*.parquet")}
    episodes = _episodes(out / "rollouts")
    assert len(episodes) == 6 * 2                       # the 3-game point's rollouts are the 6-game point's first
    labels = pq.read_table(out / "heldout" / "labels.parquet").to_pydict()
    assert len(set(labels["state_key"])) == 12 and all(0.0 <= q <= 1.0 for q in labels["q_oracle"])
    curve = json.loads((out / "curve.json").read_text())
    assert [(p["tasks"], p["rollouts"]) for p in curve["points"]] == [(3, 6), (6, 12)]
    for p in curve["points"]:
        assert 0.0 <= p["pairwise_accuracy"] <= 1.0 and p["pairs"] > 0 and p["ci95"][0] <= p["ci95"][1]
    targets = {n: pq.read_table(out / "targets" / f"n{n}_k2.parquet") for n in (3, 6)}
    assert set(targets[3]["task_id"].to_pylist()) < set(targets[6]["task_id"].to_pylist())

    # more rollouts per game for the first 3 games: only the missing episodes are played, the shards stay
    _run(out, "--tasks", "3", "--per-task", "3")
    assert all((out / "rollouts" / name).stat().st_mtime_ns == t for name, t in first.items())
    first_games = {t.task_id for t in load_tasks(out / "tasks" / "train-3")}
    assert len(first_games) == 3
    assert _episodes(out / "rollouts") - episodes == {f"rollout-s0-{t}-2" for t in first_games}
    deeper = pq.read_table(out / "targets" / "n3_k3.parquet")
    repeats = {int(e.rsplit("-", 1)[1]) for e in deeper["episode_id"].to_pylist()}
    assert repeats <= {0, 1, 2} and len(set(deeper["task_id"].to_pylist())) <= 3
    curve = json.loads((out / "curve.json").read_text())
    assert {(p["tasks"], p["rollouts"]) for p in curve["points"]} == {(3, 6), (6, 12), (3, 9)}
    pooled = {(p["tasks"], p["rollouts"]): p for p in curve["pooled"]}
    assert pooled[(3, 6)]["delta"] is None and pooled[(6, 12)]["delta_vs"] == [3, 6]
    assert (out / "curve.md").read_text().count("| soft-bce |") == 3 + 3 + 3   # pooled, by pair kind, one per seed
    assert [(r["tasks"], r["rollouts"]) for r in curve["pair_kinds"] if r["variant"] == "soft-bce"] == [
        (3, 6), (3, 9), (6, 12)]
    assert 0.0 <= curve["pi0_order"]["pairwise_accuracy"] <= 1.0 and "π0's own order" in (out / "curve.md").read_text()

    # --score: a PRM trained elsewhere on the same held-out states, beside π0's order; here a point's own PRM, whose
    # row must be the point's accuracy — scored under a fresh --out, which builds the same seeded held-out set
    # (--score goes before --report-only)
    # A second folder is also paired with the first: a copy of the same PRM differs from it by exactly 0.
    prm = out / "points" / "soft-bce" / "n6_k2" / "s0" / "prm"
    shutil.copytree(prm, tmp_path / "copy")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "scored"), "--states", "12",
                           "--eval-tasks", "4", "--workers", "2", "--report-only", "--score", str(prm),
                           str(tmp_path / "copy")], capture_output=True, text=True, timeout=300, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| critic")}
    point = next(p for p in curve["points"] if (p["tasks"], p["rollouts"], p["seed"]) == (6, 12, 0))
    assert float(rows[str(prm)][0]) == pytest.approx(point["pairwise_accuracy"], abs=5e-4)
    assert float(rows["π0's own order (no PRM)"][0]) == pytest.approx(curve["pi0_order"]["pairwise_accuracy"],
                                                                       abs=5e-4)
    assert rows[str(prm)][4] == "" and rows[str(tmp_path / "copy")][4:6] == ["+0.000", "[+0.000, +0.000]"]
    assert rows[str(tmp_path / "copy")][:4] == rows[str(prm)][:4] and len(rows[str(prm)]) == 9
    # Comma-joined folders are one critic's seeds, pooled: two copies of one PRM pool to the same accuracy.
    both = f"{prm},{tmp_path / 'copy'}"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "scored"), "--states", "12",
                           "--eval-tasks", "4", "--workers", "2", "--score", str(prm), both],
                          capture_output=True, text=True, timeout=300, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]
    pooled = next(line.split(" | ")[1:] for line in done.stdout.splitlines() if line.startswith(f"| {both} |"))
    assert pooled[0] == rows[str(prm)][0] and pooled[4] == "+0.000"


@pytest.mark.slow
def test_continuation_labels_nest_per_game_and_train_a_prm_with_a_prior(tmp_path):
    out = tmp_path / "curve"
    _run(out, "--tasks", "3", "--per-task", "2", "--variants", "cont-bradley-terry-prior")
    first = {p.name: p.read_bytes() for p in (out / "labels").glob("*.parquet")}
    assert list(first) == ["games-00000-00003.parquet"]
    _run(out, "--tasks", "3", "6", "--per-task", "2", "--variants", "cont-bradley-terry-prior",
         "cont-plackett-luce-prior-adm", "cont-plackett-luce-prior-wm", "found-soft-bce")
    assert {p.name: p.read_bytes() for p in (out / "labels").glob("*.parquet")} == {
        **first, "games-00003-00006.parquet": (out / "labels" / "games-00003-00006.parquet").read_bytes()}
    small, large = (pq.read_table(out / "targets" / f"continuation-n{n}_k2.parquet") for n in (3, 6))
    assert set(small["task_id"].to_pylist()) < set(large["task_id"].to_pylist())
    assert small.to_pylist() == [r for r in large.to_pylist() if r["task_id"] in set(small["task_id"].to_pylist())]
    for table in (small, large):   # π0's top 4 (fewer where a state has fewer commands) at ≤ 5 states per game
        per_state = table.group_by("state_key").aggregate([("action", "count")])["action_count"].to_pylist()
        per_game = table.group_by("task_id").aggregate([("state_key", "count_distinct")])
        assert max(per_state) <= 4 and min(per_state) >= 2
        assert max(per_game["state_key_count_distinct"].to_pylist()) <= 5
        assert all(0.0 <= q <= 1.0 for q in table["q"].to_pylist())
    curve = json.loads((out / "curve.json").read_text())
    assert {p["tasks"] for p in curve["points"]} == {3, 6}
    prm = out / "points" / "cont-bradley-terry-prior" / "n6_k2" / "s0" / "prm"
    assert json.loads((prm / "agentprm.json").read_text())["prior_weight"] == 1.0 and (prm / "prior").is_dir()
    # the critic shown the admissible commands: its prompt lists them, its prior reads π0's own prompt
    adm = out / "points" / "cont-plackett-luce-prior-adm" / "n6_k2" / "s0" / "prm"
    assert json.loads((adm / "agentprm.json").read_text())["prompt"]["show_admissible"] is True
    assert json.loads((adm / "prior" / "agentprm.json").read_text())["prompt"]["show_admissible"] is False
    # the critic from a world model: π0 trained on the 6 games' transitions (observations after each command), its
    # prior π0 itself
    wm = json.loads((out / "backbones" / "worldmodel-n6_k2" / "agentprm.json").read_text())["world_model"]
    assert wm["tasks"] == 6 and wm["examples"] > 0
    wm_prm = out / "points" / "cont-plackett-luce-prior-wm" / "n6_k2" / "s0" / "prm"
    from agentprm.loop.run import DEFAULT_POLICY
    from safetensors.torch import load_file
    prior, pi0 = (load_file(f / "model.safetensors") for f in (wm_prm / "prior", DEFAULT_POLICY))
    assert all(torch.equal(prior[k], pi0[k]) for k in pi0)
    # search outcomes as targets: one 0/1 row per searching command of the rollouts, counted by type in the info
    found = pq.read_table(out / "targets" / "found-n6_k2.parquet")
    counts = json.loads(found.schema.metadata[b"agentprm"])["type_counts"]
    assert found.num_rows > 0 and set(found["q"].to_pylist()) <= {0.0, 1.0}
    assert sum(n for _, n in counts.values()) >= found.num_rows and all(0 <= f <= n for f, n in counts.values())
    kinds = {row["variant"]: row for row in curve["pair_kinds"]}
    assert set(kinds) >= {"π0's own order (no PRM)", "cont-bradley-terry-prior", "cont-plackett-luce-prior-adm",
                          "cont-plackett-luce-prior-wm", "found-soft-bce",
                          "layout prior of the train games (search–search only)",
                          "search-outcome counts of n6_k2's rollouts (search–search only)"}
    assert sum(n for _, n in (kinds["π0's own order (no PRM)"][k] for k in PAIR_KINDS)) == curve["pi0_order"]["pairs"]


@pytest.mark.slow
def test_the_capacity_axis_builds_its_backbones_once_and_ranks_by_them(tmp_path):
    """The *-tiny variants in miniature: demos of the first 3 train games, a 4-step SFT backbone (built once, shared by
    both variants), its own order scored without training, and a listwise critic from it with it as the prior."""
    out = tmp_path / "curve"
    _run(out, "--tasks", "3", "--per-task", "2", "--variants", "order-tiny", "cont-plackett-luce-prior-tiny",
         "--backbone", "3", "4")
    built = out / "backbones" / "tiny-g3-s4"
    sft = json.loads((built / "agentprm.json").read_text())["sft"]
    assert sft["config"]["model"] == "tiny" and sft["metrics"]["steps"] == 4
    assert sorted(p.name for p in (out / "backbones").iterdir()) == ["demos-train-3.parquet", "tiny-g3-s4"]
    order = json.loads((out / "points" / "order-tiny" / "n3_k2" / "s0" / "result.json").read_text())
    assert order["examples"] == 0 and order["train"]["pairs"] == 0 and order["pairs"] > 0
    critic = out / "points" / "cont-plackett-luce-prior-tiny" / "n3_k2" / "s0"
    assert json.loads((critic / "result.json").read_text())["examples"] > 0
    meta = json.loads((critic / "prm" / "agentprm.json").read_text())
    assert meta["prior_weight"] == 1.0 and (critic / "prm" / "prior" / "config.json").is_file()
    pairs = json.loads((out / "curve.json").read_text())["variant_pairs"]   # the critic paired with its backbone's order
    assert [(c["a"], c["b"]) for c in pairs] == [("cont-plackett-luce-prior-tiny", "order-tiny")]


def _state(key: str, memory=(), admissible=()) -> AgentState:
    return AgentState(task="put an apple in fridge", task_id="t", room=("fridge 1", "cabinet 1", "drawer 1"),
                      memory=memory, location=None, holding=None, held_state=(), recent=(), observation="",
                      admissible=admissible, steps=0, _key=key)


def test_pair_kinds_split_the_oracles_pairs_by_what_the_state_has_not_shown():
    """A command searches when it goes to or opens a receptacle whose contents the state does not know (never seen,
    or seen closed); pairs are counted by how many of their two commands search, each ordered pair once."""
    seen = _state("a", memory=(("cabinet 1", ("apple 1",)), ("drawer 1", None)))
    assert [curve_script.searches(seen, a) for a in ("go to fridge 1", "go to cabinet 1", "open drawer 1",
                                                     "take apple 1 from cabinet 1", "open cabinet 1")] == [
        True, False, True, False, False]
    other = _state("b")
    states = [seen] * 3 + [other] * 2
    actions = ["go to fridge 1", "open drawer 1", "go to cabinet 1", "go to fridge 1", "inventory"]
    truth = [0.9, 0.5, 0.5, 0.2, 0.8]      # state a: fridge > drawer, fridge > cabinet; state b: inventory > fridge
    pred = [0.1, 0.3, 0.7, 0.4, 0.4]       # a: both of fridge's pairs wrong; b: a tie, half right
    found = curve_script.by_pair_kind(pred, truth, states, actions)
    assert found == {"search–search": [0.0, 1], "search–other": [0.5, 2], "other–other": [0.0, 0]}


def _game(folder: Path, placed: list[tuple[str, str]], receptacles: list[str]) -> Path:
    folder.mkdir(parents=True)
    lines = [f"        {r}_bar__plus_0{i}_dot_00 - receptacle" for i, r in enumerate(receptacles)]
    lines += [f"        (inReceptacle {o}_bar__plus_0{i}_dot_00 {r}_bar__plus_00_dot_00)" for i, (o, r) in enumerate(placed)]
    (folder / "game.tw-pddl").write_text(json.dumps({"pddl_problem": "(:objects\n" + "\n".join(lines) + "\n)"}))
    return folder


def test_the_layout_prior_counts_where_things_start_and_ranks_two_searches(tmp_path):
    """P(type o in a receptacle of type r | the game has both), from the games' PDDL; a search scored by it."""
    games = [_game(tmp_path / "a", [("Apple", "Fridge"), ("Mug", "Cabinet")], ["Fridge", "Cabinet", "Drawer"]),
             _game(tmp_path / "b", [("Apple", "CounterTop"), ("Apple", "Fridge")], ["Fridge", "CounterTop"]),
             _game(tmp_path / "c", [("Apple", "Drawer")], ["Drawer", "Fridge"])]
    prior = curve_script.layout_prior(games)
    # apples in all three games; a fridge in all three, apples in two of them; a drawer in a and c, an apple in c's
    assert prior[("apple", "fridge")] == pytest.approx(2 / 3) and prior[("apple", "drawer")] == pytest.approx(1 / 2)
    assert prior[("apple", "countertop")] == 1.0 and prior[("mug", "drawer")] == 0.0
    state = AgentState(task="put a clean apple in countertop.", task_id="t", room=("fridge 1", "drawer 2"),
                       memory=(("cabinet 1", ("mug 1",)),), location=None, holding=None, held_state=(), recent=(),
                       observation="", admissible=(), steps=0, _key="s")
    scores = curve_script.layout_scores(prior, [state] * 4, ["go to fridge 1", "open drawer 2", "go to cabinet 1",
                                                             "inventory"])
    assert scores == pytest.approx([2 / 3, 1 / 2, 0.0, 0.0])   # cabinet 1 was seen: not a search


def test_the_layout_curve_ranks_the_search_pairs_by_more_games_and_refuses_a_short_folder(tmp_path, capsys):
    """`--layout-games`: the search–search pairs ranked by the first n games' layout prior at each n, beside π0's own
    order (a state's candidates stored best first); a folder with fewer games than --tasks is refused before the
    held-out set is begun."""
    games = [_game(tmp_path / "g0", [("Apple", "Drawer")], ["Drawer", "Fridge"]),     # alone: apples in drawers
             _game(tmp_path / "g1", [("Apple", "Fridge"), ("Mug", "Cabinet")], ["Fridge", "Cabinet", "Drawer"]),
             _game(tmp_path / "g2", [("Apple", "CounterTop"), ("Apple", "Fridge")], ["Fridge", "CounterTop"])]
    state = AgentState(task="put a clean apple in countertop.", task_id="t", room=("fridge 1", "drawer 2"),
                       memory=(), location=None, holding=None, held_state=(), recent=(), observation="",
                       admissible=(), steps=0, _key="s")
    held = ([state] * 2, ["open drawer 2", "go to fridge 1"], [0.2, 0.9])   # π0 put the drawer first; the fridge wins
    curve_script.layout_curve(games, [1, 3], held)
    rows = {tuple(c.strip() for c in line.split("|")[1:4]) for line in capsys.readouterr().out.splitlines()}
    # one game: drawer 1 vs fridge 0, wrong; three: fridge 2/3 vs drawer 1/2, right — π0's own order is wrong
    assert {("π0's own order", "—", "0.000"), ("layout prior", "1", "0.000"), ("layout prior", "3", "1.000")} <= rows
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--layout-games",
                           str(tmp_path), "--tasks", "3", "4"], capture_output=True, text=True, timeout=120,
                          env=os.environ)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and lines == [f"--layout-games {tmp_path}: 3 games with a game.tw-pddl, fewer than "
                                              "the 4 --tasks asks for"]
    assert not (tmp_path / "out").exists()
