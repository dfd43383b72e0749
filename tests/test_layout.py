"""The layout prior (search/layout.py): counts from PDDL problems, the smoothed chance, a searching command's layout
advantage on a hand-built state, its file round trip and refusals, and the critic that adds it to another's logits."""
from __future__ import annotations

import json
import os
import math

import pytest
import torch

from agentprm.agent.state import AgentState
from agentprm.envs.base import TaskSpec, Turn
from agentprm.errors import UserError
from agentprm.search.layout import LayoutCritic, LayoutPrior, searches, wanted

TASK = "put some apple on diningtable."
INTRO = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you "
         "see a cabinet 1, a diningtable 1, a fridge 1, and a sinkbasin 1.\n\nYour task is to: " + TASK)


def _game(folder, placed: list[tuple[str, str]], receptacles: list[str]):
    """A game folder whose PDDL problem places objects (type, receptacle type) among `receptacles`."""
    objects = "".join(f"        {o}_bar__plus_00_dot_1_bar_{k} - object\n" for k, (o, _) in enumerate(placed))
    recs = "".join(f"        {r}_bar__plus_01_dot_0_bar_{k} - receptacle\n" for k, r in enumerate(receptacles))
    init = "".join(f"        (inReceptacle {o}_bar__plus_00_dot_1_bar_{k} {r}_bar__plus_01_dot_0_bar_"
                   f"{receptacles.index(r)})\n" for k, (o, r) in enumerate(placed))
    folder.mkdir()
    problem = f"(define (problem plan)\n    (:objects\n{objects}{recs}    )\n    (:init\n{init}    )\n)"
    (folder / "game.tw-pddl").write_text(json.dumps({"pddl_problem": problem}))
    return TaskSpec(task_id=folder.name, task_type="pick_and_place_simple", game=str(folder))


@pytest.fixture
def prior(tmp_path):
    rooms = ["Fridge", "Cabinet", "DiningTable", "SinkBasin"]
    tasks = [_game(tmp_path / "g0", [("Apple", "Fridge"), ("Mug", "Cabinet")], rooms),
             _game(tmp_path / "g1", [("Apple", "Fridge")], rooms),
             _game(tmp_path / "g2", [("Apple", "SinkBasin")], rooms),
             _game(tmp_path / "g3", [("Mug", "Cabinet")], rooms[:2])]
    return LayoutPrior.from_tasks(tasks)


def test_counts_and_smoothed_chance(prior):
    assert prior.games == 4
    assert prior.placed[("apple", "fridge")] == 2 and prior.both[("apple", "fridge")] == 3
    assert prior.both[("mug", "cabinet")] == 2 and prior.placed[("mug", "cabinet")] == 2
    assert prior.chance("apple", "fridge") == pytest.approx(2.5 / 4)
    assert prior.chance("apple", "cabinet") == pytest.approx(0.5 / 4)
    assert prior.chance("apple", "toaster") == 0.5        # a pair no game has: 1/2 of nothing


def test_a_search_is_ranked_by_where_the_wanted_object_tends_to_be(prior):
    state = AgentState.start(Turn(task=TASK, observation=INTRO, admissible=("look",)), task_id="g")
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    chances = {r: prior.chance("apple", r) for r in ("cabinet", "diningtable", "fridge", "sinkbasin")}
    mean = sum(map(logit, chances.values())) / 4
    assert prior.advantage(state, "go to fridge 1") == pytest.approx(logit(chances["fridge"]) - mean)
    assert prior.advantage(state, "go to fridge 1") > prior.advantage(state, "go to sinkbasin 1") \
        > prior.advantage(state, "go to cabinet 1")
    assert prior.advantage(state, "look") == 0.0 and prior.advantage(state, "inventory") == 0.0

    # once the fridge has been seen open it is no search; the mean is over what is still unexplored
    seen = state.advance("go to fridge 1", Turn(task=TASK, observation="You arrive at fridge 1. The fridge 1 is "
                                                 "open. In it, you see a egg 1.", admissible=("look",)))
    assert not searches(seen, "go to fridge 1") and prior.advantage(seen, "go to fridge 1") == 0.0
    rest = [logit(chances[r]) for r in ("cabinet", "diningtable", "sinkbasin")]
    assert prior.advantage(seen, "go to sinkbasin 1") == pytest.approx(logit(chances["sinkbasin"]) - sum(rest) / 3)

    # with the apple in hand there is nothing left to search for
    holding = seen.advance("go to sinkbasin 1", Turn(task=TASK, observation="You arrive at sinkbasin 1. On the "
                                                     "sinkbasin 1, you see a apple 2.", admissible=("look",)))
    holding = holding.advance("take apple 2 from sinkbasin 1", Turn(
        task=TASK, observation="You pick up the apple 2 from the sinkbasin 1.", admissible=("look",)))
    assert wanted(state) == {"apple"} and wanted(holding) == set()
    assert prior.advantage(holding, "go to cabinet 1") == 0.0


def test_the_prior_round_trips_and_bad_files_are_refused(prior, tmp_path):
    path = tmp_path / "layout.json"
    prior.save(path)
    assert LayoutPrior.load(path) == prior
    path.write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(UserError, match="layout.json: not a layout prior"):
        LayoutPrior.load(path)
    with pytest.raises(UserError, match="nothing.json: not a layout prior"):
        LayoutPrior.load(tmp_path / "nothing.json")
    for text in ("[1]", "[" * 100_000, '"text"'):   # a list, nesting past the parser, a string: one line each
        path.write_text(text)
        with pytest.raises(UserError, match="layout.json: not a layout prior"):
            LayoutPrior.load(path)
    os.mkfifo(tmp_path / "fifo.json")   # would block the read
    with pytest.raises(UserError, match="fifo.json: not a regular file"):
        LayoutPrior.load(tmp_path / "fifo.json")
    bad = tmp_path / "g9"
    bad.mkdir()
    (bad / "game.tw-pddl").write_text("{}")
    with pytest.raises(UserError, match="g9/game.tw-pddl: not an ALFWorld game file"):
        LayoutPrior.from_tasks([TaskSpec(task_id="g9", task_type="x", game=str(bad))])


class _Probabilities:
    """A critic with probabilities only (no `logits`): the layout critic takes their logit."""
    def score(self, states, replies):
        return torch.tensor([{"look": 0.9, "go to fridge 1": 0.5, "go to cabinet 1": 0.5}[r] for r in replies])


class _Logits(_Probabilities):
    """A critic whose logits run past float32's sigmoid, as a listwise PRM's do: they are used as they are."""
    def logits(self, states, replies):
        return torch.tensor([{"look": 40.0, "go to fridge 1": 39.0, "go to cabinet 1": 39.0}[r] for r in replies],
                            dtype=torch.float64)


def test_the_layout_critic_adds_weighted_advantage_to_the_base_logits(prior):
    state = AgentState.start(Turn(task=TASK, observation=INTRO, admissible=("look",)), task_id="g")
    replies = ["look", "go to fridge 1", "go to cabinet 1"]
    f = torch.tensor([prior.advantage(state, r) for r in replies])
    states = [state] * 3
    plain = LayoutCritic(_Probabilities(), prior, 0.0).score(states, replies)
    assert plain.tolist() == pytest.approx([math.log(9), 0.0, 0.0], abs=1e-6)
    informed = LayoutCritic(_Probabilities(), prior, 2.0).score(states, replies)
    assert informed.tolist() == pytest.approx((plain + 2.0 * f).tolist(), abs=1e-5)
    assert informed[1] > informed[2]                      # the fridge before the cabinet, as the counts say
    assert LayoutCritic(_Logits(), prior, 0.5).score(states, replies).tolist() == pytest.approx(
        [40.0, 39.0 + 0.5 * f[1].item(), 39.0 + 0.5 * f[2].item()], abs=1e-4)
    alone = LayoutCritic(None, prior, 1.0).score(states, replies)
    assert alone[0] == 0.0 and alone[1] > 0 > alone[2]
    with pytest.raises(ValueError, match="3 states but 2 replies"):
        LayoutCritic(None, prior, 1.0).score(states, replies[:2])


def test_the_cli_counts_a_train_folder_and_eval_searches_with_the_prior(generated_tasks, tiny_policy, tmp_path,
                                                                        capsys):
    """`agentprm tasks layout` writes the counts of a generated train folder; `eval --best-of 2 --layout` plays with
    them; a missing weight, beam search, and a file that is no prior are one-line errors before any play."""
    from agentprm.cli import main
    from agentprm.envs.alfworld.tasks import load_tasks

    path = tmp_path / "layout.json"
    assert main(["tasks", "layout", "--tasks", str(generated_tasks.train), "--out", str(path)]) == 0
    made = LayoutPrior.load(path)
    assert made == LayoutPrior.from_tasks(load_tasks(generated_tasks.train)) and made.games == generated_tasks.num
    assert sum(made.placed.values()) > 0 and all(made.placed.get(k, 0) <= n for k, n in made.both.items())

    base = ["eval", "--policy", str(tiny_policy), "--tasks", str(generated_tasks.eval), "--prm", "uniform",
            "--temperature", "1", "--max-steps", "2", "--workers", "1"]
    summary = tmp_path / "eval.json"
    assert main([*base, "--best-of", "2", "--layout", str(path), "--layout-weight", "2", "--json", str(summary)]) == 0
    assert json.loads(summary.read_text())["episodes"] == generated_tasks.num
    capsys.readouterr()
    for extra, message in ((["--best-of", "2", "--layout", str(path)], "--layout and --layout-weight go together"),
                           (["--beam-width", "2", "--layout", str(path), "--layout-weight", "1"], "needs --best-of"),
                           (["--best-of", "2", "--layout", str(tmp_path / "eval.json"), "--layout-weight", "1"],
                            "eval.json: not a layout prior")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err


def test_the_study_chooses_the_weight_on_held_out_pairs_and_cross_fits_it():
    """scripts/informed_critic.py `choose_weight`: on states where the base critic orders the pair wrong and the
    layout advantage right, the largest weight of the grid wins everywhere, on either half of the states too."""
    import importlib.util
    import sys
    from pathlib import Path

    import numpy as np

    path = Path(__file__).resolve().parents[1] / "scripts" / "informed_critic.py"
    spec = importlib.util.spec_from_file_location("informed_critic", path)
    study = sys.modules["informed_critic"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    keys = [f"s{k}" for k in range(40) for _ in range(2)]
    truth = np.array([1.0, 0.0] * 40)
    base = np.array([0.0, 1.0] * 20 + [1.0, 0.0] * 20)    # wrong on the first 20 states, right on the rest
    f = np.array([0.1, -0.1] * 20 + [0.0, 0.0] * 20)      # the prior speaks only where the base is wrong
    fit = study.choose_weight(base, f, truth, keys)
    assert fit["accuracy_at_0"] == 0.5 and fit["accuracy"] == 1.0 and fit["cross_fitted"] == 1.0
    assert fit["weight"] == min(w for w in study.WEIGHTS if w * 0.2 > 1.0)   # the first w whose 2w·0.1 beats 1
    assert fit["grid"]["0.0"] == 0.5
