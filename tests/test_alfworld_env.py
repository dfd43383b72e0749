import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentprm.envs.alfworld import speedups
from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.errors import UserError


@pytest.fixture(scope="module")
def games(generated_tasks) -> list[Path]:
    """Two small-room games: kitchens are the slowest to load."""
    return [Path(t.game) for t in load_tasks(generated_tasks.train) if t.floorplan > 30][:2]


def walkthrough(game: Path) -> list[str]:
    return json.loads((game / "game.tw-pddl").read_text())["walkthrough"]


def transcript(game: Path, fast: bool, seed: int = 0, random_steps: int = 8) -> list[list]:
    """The walkthrough episode, then an episode of seeded random admissible actions and one inadmissible one."""
    env = AlfWorldEnv(game, max_steps=100, fast=fast)
    rng = random.Random(seed)
    out = []

    def record(action: str, turn) -> None:
        out.append([action, turn.task, turn.observation, list(turn.admissible), turn.reward, turn.done, turn.won])

    record("", env.reset())
    for action in walkthrough(game):
        record(action, env.step(action))
    turn = env.reset()
    record("", turn)
    for _ in range(random_steps):
        action = rng.choice(sorted(turn.admissible))
        turn = env.step(action)
        record(action, turn)
    record("dance", env.step("dance"))
    env.close()
    return out


def fresh_process_transcripts(games: list[Path], out: Path, fast: bool, sas_cache: Path | None = None) -> list:
    """In a fresh process: the step caches, once installed, are process-wide."""
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "from pathlib import Path; from test_alfworld_env import transcript; "
            f"Path(sys.argv[1]).write_text(json.dumps([transcript(Path(g), fast={fast}) for g in sys.argv[2:]]))")
    env = {**os.environ, "AGENTPRM_SAS_CACHE": str(sas_cache)} if sas_cache else None
    subprocess.run([sys.executable, "-c", code, str(out), *map(str, games)], check=True, timeout=600, env=env)
    return json.loads(out.read_text())


def test_cached_and_uncached_transcripts_are_identical(games, tmp_path):
    cached = [transcript(g, fast=True) for g in games]
    assert cached == fresh_process_transcripts(games, tmp_path / "uncached.json", fast=False)
    assert all(episode[len(walkthrough(g))][-1] for g, episode in zip(games, cached))  # walkthrough wins


def test_a_seen_state_reuses_its_admissible_commands(games):
    from agentprm.envs.alfworld import speedups

    env = AlfWorldEnv(games[0])
    first = env.reset()
    seen = len(speedups._gathered_by_state)
    assert seen > 0
    again = AlfWorldEnv(games[0]).reset()   # another env, same game and state: a cache hit, same turn
    nothing = env.step("dance")             # an inadmissible command leaves the state as it was
    assert len(speedups._gathered_by_state) == seen
    assert again == first and nothing.admissible == first.admissible and nothing.observation == "Nothing happens."


def test_admissible_cache_starting_over_changes_nothing(games, monkeypatch):
    from agentprm.envs.alfworld import speedups

    want = transcript(games[0], fast=True)
    monkeypatch.setattr(speedups, "MAX_STATES", 2)   # starts over every other new state: facts renumbered each time
    assert transcript(games[0], fast=True) == want
    assert len(speedups._gathered_by_state) <= 2


def test_sas_disk_cache_is_written_then_read_with_identical_transcripts(games, tmp_path):
    cache = tmp_path / "sas"
    first = fresh_process_transcripts(games, tmp_path / "first.json", fast=True, sas_cache=cache)
    files = sorted(cache.glob("*.sas"))
    assert len(files) == 2 * len(games)  # per game: the plain and the optimised translation
    stamps = [(f.stat().st_ino, f.read_bytes()) for f in files]
    second = fresh_process_transcripts(games, tmp_path / "second.json", fast=True, sas_cache=cache)
    assert second == first
    assert [(f.stat().st_ino, f.read_bytes()) for f in sorted(cache.glob("*.sas"))] == stamps  # read, not rewritten
    assert first == [transcript(g, fast=True) for g in games]


class _FakeFastDownward:
    calls = 0

    @classmethod
    def pddl2sas(cls, domain, problem, verbose=False, optimize=False):
        cls.calls += 1
        return "task", f"begin_version\n3\nend_version\n{problem}\n"


def test_a_corrupt_sas_cache_entry_is_translated_again_not_failed_on(tmp_path, monkeypatch):
    """a truncated or corrupt entry used to make every episode of its game fail until someone deleted it."""
    monkeypatch.setenv("AGENTPRM_SAS_CACHE", str(tmp_path))
    _FakeFastDownward.calls = 0
    task, sas = speedups._translate_via_disk(_FakeFastDownward, "(domain)", "(problem p)", False, False)
    [entry] = list(tmp_path.iterdir())
    assert entry.name.endswith(speedups.SAS_SUFFIX) and entry.read_text().endswith(sas)
    entry.write_text(entry.read_text()[:-8])                       # truncated
    assert speedups._read_entry(entry) is None and not entry.exists()
    again = speedups._translate_via_disk(_FakeFastDownward, "(domain)", "(problem p)", False, False)
    assert again == (task, sas) and _FakeFastDownward.calls == 2 and speedups._read_entry(entry) == sas


def test_the_sas_cache_is_bounded_least_recently_used_first(tmp_path):
    sizes = {}
    for k in range(6):
        p = tmp_path / f"{k:064x}{speedups.SAS_SUFFIX}"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (1000 + k, 1000 + k))                        # k = 0 is the least recently used
        sizes[p.name] = 1000
    other = tmp_path / "notes.sas"                                 # not an entry of ours: never deleted
    other.write_bytes(b"y" * 5000)
    assert speedups.bound_cache(tmp_path, limit=10_000) == 0       # 6,000 bytes of entries: within the bound
    assert speedups.bound_cache(tmp_path, limit=4_000) == 3        # down to 90% of the limit: 3,000 bytes left
    assert sorted(p.name[:64] for p in tmp_path.glob("0*")) == [f"{k:064x}" for k in (3, 4, 5)]
    assert other.exists()


def test_a_write_that_evicts_warns_once_a_process(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENTPRM_SAS_CACHE", str(tmp_path))
    monkeypatch.setenv("AGENTPRM_SAS_CACHE_MB", str(2500 / 2 ** 20))   # 2,500 bytes: two ~1 kB entries fit, not three
    monkeypatch.setattr(speedups, "_evicted_warned", False)
    for k in range(4):
        speedups._write_entry(tmp_path / f"{k:064x}{speedups.SAS_SUFFIX}", "s" * 1000)
    err = capsys.readouterr().err
    assert err.count("warning: SAS cache") == 1 and "$AGENTPRM_SAS_CACHE_MB" in err
    assert len(list(tmp_path.glob(f"*{speedups.SAS_SUFFIX}"))) < 4       # it did evict


def test_closed_envs_hand_their_fast_downward_library_to_the_next(games, tmp_path):
    """Each env load copies the 34 MB libdownward.so and loads it; a loaded copy is never unloaded, so stock
    TextWorld keeps one deleted-but-mapped copy per env load (the oracle's thousands of loads filled a disk). With the
    speed-ups a closed env's copy is reused: 2 open at once -> 2 copies, however many loads. Interleaved episodes on
    reused copies still give the stock transcripts."""
    code = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from test_alfworld_env import transcript; from agentprm.envs.alfworld.engine import AlfWorldEnv; "
            "games = [Path(g) for g in sys.argv[3:]]; "
            "a, b = AlfWorldEnv(games[0], fast=True), AlfWorldEnv(games[1], fast=True); a.reset(); b.reset(); "
            "a.close(); b.close(); "
            "out = [transcript(g, fast=True) for g in games * 3]; "
            "maps = {l.split(None, 5)[5].strip() for l in open('/proc/self/maps') if 'libdownward' in l}; "
            "Path(sys.argv[2]).write_text(json.dumps({'copies': len(maps), 'transcripts': out}))")
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(out), *map(str, games)], check=True,
                   timeout=600)
    got = json.loads(out.read_text())
    assert got["copies"] == 2                                   # 8 env loads, 2 ever open at once
    stock = [transcript(g, fast=False) for g in games]
    assert got["transcripts"] == stock * 3


def test_walkthrough_wins_with_reward_on_the_winning_step(games):
    env = AlfWorldEnv(games[0])
    first = env.reset()
    assert first.task and "Your task is to:" in first.observation and first.admissible
    turns = [env.step(a) for a in walkthrough(games[0])]
    assert [t.reward for t in turns] == [0.0] * (len(turns) - 1) + [1.0]
    assert [t.done for t in turns] == [False] * (len(turns) - 1) + [True]
    assert turns[-1].won and not any(t.won for t in turns[:-1])
    assert all(t.info["admissible_action"] for t in turns)


def test_a_game_under_a_folder_named_like_a_z_machine_file_plays(games, tmp_path):
    """TextWorld guesses the engine from the path: any path holding ".z1".."z8" went to the z-machine ("Only
    .z[1-8] files are supported"), e.g. a run folder "v.z3" or a temp folder ".eval.z5k2.tmp"."""
    folder = tmp_path / "v.z3" / games[0].name
    shutil.copytree(games[0], folder)
    env = AlfWorldEnv(folder)
    assert env.reset().admissible and env.step(walkthrough(folder)[0]).info["admissible_action"]
    env.close()


def test_inadmissible_action_is_answered_not_raised(games):
    env = AlfWorldEnv(games[0])
    first = env.reset()
    turn = env.step("dance wildly")
    assert turn.observation == "Nothing happens."
    assert turn.info["admissible_action"] is False
    assert not turn.done and turn.admissible == first.admissible


def test_max_steps_truncates(games):
    env = AlfWorldEnv(games[0], max_steps=2)
    env.reset()
    assert not env.step("look").done
    last = env.step("look")
    assert last.done and last.info["truncated"] and not last.won and last.reward == 0.0
    assert not env.reset().done  # the budget is per episode


@pytest.fixture
def game_copy(games, tmp_path) -> Path:
    return Path(shutil.copytree(games[0], tmp_path / "game"))


def test_missing_game_folder(tmp_path):
    with pytest.raises(UserError, match="nowhere.*no such game file"):
        AlfWorldEnv(tmp_path / "nowhere")


def test_malformed_game_json(game_copy):
    (game_copy / "game.tw-pddl").write_text("{not json")
    with pytest.raises(UserError, match="game.tw-pddl: not valid JSON"):
        AlfWorldEnv(game_copy)


def test_game_missing_a_field(game_copy):
    game = game_copy / "game.tw-pddl"
    data = json.loads(game.read_text())
    del data["grammar"]
    game.write_text(json.dumps(data))
    with pytest.raises(UserError, match="game.tw-pddl: missing field 'grammar'"):
        AlfWorldEnv(game_copy)


def test_traj_data_missing_task_type(game_copy):
    (game_copy / "traj_data.json").write_text(json.dumps({"pddl_params": {}}))
    with pytest.raises(UserError, match="traj_data.json: field 'task_type'"):
        AlfWorldEnv(game_copy)


def test_grammar_expressions_are_evaluated_without_python_eval():
    """TextWorld eval()s every {...} of a game's grammar; ours walks the syntax tree of the few forms
    ALFWorld uses and refuses the rest."""
    from types import SimpleNamespace

    from agentprm.envs.alfworld.safe_grammar import UnsafeExpression, evaluate

    o = SimpleNamespace(name="apple 1", indefinite="an", id="apple_1")
    r = SimpleNamespace(name="", id="drawer 2")
    variables = {"o": o, "r": r}
    for expression in ("o.name", "r.name or r.id", "o.indefinite + ' ' + o.name", "o.name and r.id", "'x'"):
        assert evaluate(expression, variables) == eval(expression, {}, variables)
    for bad in ("__import__('os').system('true')", "o.__class__", "o.name.upper()", "(lambda: 1)()",
                "[c for c in 'ab']", "o.name[0]", "nope.name", "o.name if o else r"):
        with pytest.raises(UnsafeExpression):
            evaluate(bad, variables)


def test_a_game_file_cannot_run_code(games, tmp_path):
    """A crafted grammar expression that would write a file: playing the game fails (an env error), nothing runs."""
    marker = tmp_path / "pwned"
    game = tmp_path / "game"
    shutil.copytree(games[0], game)
    data = json.loads((game / "game.tw-pddl").read_text())
    for name in ("o", "r"):      # object and receptacle names: derived in the first steps' feedback
        data["grammar"] = data["grammar"].replace(f"{{{name}.name}}",
                                                  f"{{open({str(marker)!r}, 'w').write('x') and {name}.name}}")
    (game / "game.tw-pddl").write_text(json.dumps(data))
    with pytest.raises(Exception, match="not allowed in a game file"):
        env = AlfWorldEnv(game, max_steps=10)
        turn = env.reset()
        for _ in range(5):
            turn = env.step(turn.admissible[0])
    assert not marker.exists()


def test_traj_data_that_is_not_an_object_is_a_one_line_error(tmp_path):
    from agentprm.envs.alfworld.engine import TRAJ_FILE, read_traj_data
    from agentprm.errors import UserError

    game = tmp_path / "game.tw-pddl"
    game.write_text("{}")
    for text, says in (("[1, 2]", "must be a JSON object with a 'task_type' field, got list"),
                       ('{"task_type": "fly"}', "field 'task_type' is 'fly'")):
        (tmp_path / TRAJ_FILE).write_text(text)
        with pytest.raises(UserError, match=says):
            read_traj_data(game)
    (tmp_path / TRAJ_FILE).write_text('{"task_type": "pick_and_place_simple"}')
    assert read_traj_data(game)["task_type"] == "pick_and_place_simple"
