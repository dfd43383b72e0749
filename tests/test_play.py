import io
import json
from pathlib import Path

import pytest

from agentprm.cli import main
from agentprm.envs.alfworld.tasks import load_tasks


@pytest.fixture(scope="module")
def game(generated_tasks) -> Path:
    """A small-room game: kitchens are the slowest to load."""
    return next(Path(t.game) for t in load_tasks(generated_tasks.train) if t.floorplan > 30)


def play(monkeypatch, capsys, game: Path, typed: list[str], *flags: str) -> tuple[int, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in typed)))
    code = main(["play", "--game", str(game), *flags])
    return code, capsys.readouterr().out


def test_walkthrough_typed_as_numbers_and_text_wins(monkeypatch, capsys, game):
    walk = json.loads((game / "game.tw-pddl").read_text())["walkthrough"]
    code, out = play(monkeypatch, capsys, game, ["", "0", "dance", *walk])
    assert code == 0
    assert out.startswith("Task: ") and " 1. " in out
    assert "no command 0" in out and "Nothing happens." in out
    assert out.rstrip().endswith(f"Won after {len(walk) + 1} steps.")


def test_numbers_pick_admissible_commands(monkeypatch, capsys, game):
    code, out = play(monkeypatch, capsys, game, ["1", "q"])
    first_command = out.split(" 1. ", 1)[1].splitlines()[0]
    assert f"> {first_command}" in out
    assert out.rstrip().endswith("Quit after 1 steps (not won).")


def test_end_of_input_quits(monkeypatch, capsys, game):
    code, out = play(monkeypatch, capsys, game, [])
    assert code == 0 and "Quit after 0 steps" in out


def test_step_budget(monkeypatch, capsys, game):
    code, out = play(monkeypatch, capsys, game, ["look", "look"], "--max-steps", "2")
    assert code == 0 and "[step 2/2]" in out
    assert out.rstrip().endswith("Not won: the step budget ran out after 2 steps.")


def test_bad_game_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    code = main(["play", "--game", str(tmp_path / "nowhere")])
    assert code == 2
    assert "nowhere: no such game file" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (lambda data: data.update(pddl_problem="(define (problem broken"), "the game cannot be played"),
    (lambda data: data.update(grammar=data["grammar"].replace("{o.name}", "{__import__('os').system('true')}")),
     "not allowed in a game file"),
])
def test_a_broken_or_hostile_game_is_a_one_line_error(monkeypatch, capsys, tmp_path, game, damage, message):
    """`play` on a broken PDDL problem or a hostile grammar was a traceback (ParseError, UnsafeExpression);
    it now fails as an episode of `eval` does, in one line."""
    import shutil

    broken = tmp_path / "game"
    shutil.copytree(game, broken)
    data = json.loads((broken / "game.tw-pddl").read_text())
    damage(data)
    (broken / "game.tw-pddl").write_text(json.dumps(data))
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in data["walkthrough"][:5])))
    code = main(["play", "--game", str(broken)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err and message in err, err


def test_a_typo_that_looks_like_a_number_is_asked_again_not_the_end_of_the_game(monkeypatch, capsys, game):
    """'²' is a digit to str.isdigit but not to int(); 5,000 digits pass Python's integer limit: each is a choice
    that does not exist, asked again, and the game goes on."""
    code, out = play(monkeypatch, capsys, game, ["²", "9" * 5000, "1", "q"])
    assert code == 0 and out.count("no command") == 2
    assert out.rstrip().endswith("Quit after 1 steps (not won).")
