"""The hostile battery, committed: bad or odd input to every command, each case run through the real CLI
in-process, in the current folder of a user whose tree holds their own files, a folder that looks like agentprm's,
a FIFO, symlinks and a plain file. Every case must end the same way: exit code 2, one line on stderr that names the
command, no traceback, and the user's tree unchanged (`tree`: type, content digest and mtime of every path, hidden
ones included). Groups:

- every numeric flag of every command × values outside its rule in agentprm/ranges.py (the boundary, NaN, ±inf, a
  value not of the flag's type), and hypothesis drawing further out-of-range values from the same rules;
- argparse's own errors (a missing argument, an unknown flag, a bad choice) for every command;
- output paths that are not agentprm's to write, for every writer: a user's file, folder or look-alike folder, a
  FIFO, symlinks, a device, a path under a file, an empty path, an output that is an input;
- inputs that are missing, empty, garbage, of the wrong kind, or would block a reader (FIFOs);
- loop configs that are not what they claim (YAML that repeats keys, aliases, lists, wrong types, unknown fields).

A command that would do work on a case fails the tree check or the exit code; one that blocks (a FIFO read) fails
after CASE_SECONDS. `test_the_battery_has_at_least_300_cases` keeps the count honest.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentprm.cli import build_parser, main
from agentprm.ranges import RULES, Range, rule_for
from conftest import tree

# Each command's required arguments, none of which needs to exist: the flag checks come before any reading.
BASE = {
    "tasks generate": ["tasks", "generate", "--out", "g", "--split", "train", "--num", "1"],
    "tasks list": ["tasks", "list", "--tasks", "t"],
    "tasks layout": ["tasks", "layout", "--tasks", "t", "--out", "l.json"],
    "demos": ["demos", "--tasks", "t", "--out", "d.parquet"],
    "play": ["play", "--game", "g"],
    "sft": ["sft", "--demos", "d", "--out", "o"],
    "rollout": ["rollout", "--policy", "p", "--tasks", "t", "--out", "o"],
    "eval": ["eval", "--policy", "p", "--tasks", "t"],
    "targets mc": ["targets", "mc", "--rollouts", "r", "--out", "o.parquet"],
    "targets pairs": ["targets", "pairs", "--targets", "t", "--out", "p.parquet"],
    "train-prm": ["train-prm", "--targets", "t", "--init", "i", "--out", "o"],
    "train-policy": ["train-policy", "--policy", "p", "--prm", "q", "--rollouts", "r", "--out", "o"],
    "loop": ["loop", "--config", "c.yaml", "--run-dir", "r"],
    "quickstart": ["quickstart", "--out", "o"],
    "serve": ["serve", "--policy", "p"],
    "serve-prm": ["serve-prm", "--prm", "q"],
    "view": ["view", "r"],
    "reason problems": ["reason", "problems", "--out", "p.jsonl", "--split", "train", "--num", "1"],
    "reason sft": ["reason", "sft", "--problems", "p", "--out", "o"],
    "reason eval": ["reason", "eval", "--model", "m", "--problems", "p"],
    "reason rl": ["reason", "rl", "--model", "m", "--problems", "p", "--out", "o"],
    "reason label": ["reason", "label", "--model", "m", "--problems", "p", "--out", "l.parquet"],
    "reason prm": ["reason", "prm", "--model", "m", "--problems", "p", "--data", "d", "--out", "o"],
}


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))
    if path:
        yield " ".join(path), parser


def numeric_flags() -> list[tuple[str, str, type, Range]]:
    """(command, flag, type, rule) of every int/float flag of every command; the rule as check_flags applies it."""
    found = []
    for command, parser in _parsers(build_parser()):
        generated = {prefix + n: (cls, n) for cls, prefix, names in parser.get_default("_sections") or [] for n in names}
        for a in parser._actions:
            if a.type in (int, float):
                rule = rule_for(*generated[a.dest]) if a.dest in generated else RULES.get(a.dest)
                found.append((command, a.option_strings[-1], a.type, rule))
    return found


def bad_values(kind: type, rule: Range) -> list[str]:
    """The boundary just outside the rule on each side it has, NaN and ±inf, and a value not of the flag's type."""
    values = [rule.low if rule.low_open else rule.low - (1 if kind is int else 1e-6)]
    if rule.high < math.inf:
        values.append(rule.high if rule.high_open else rule.high + (1 if kind is int else 1e-6))
    values = [str(int(v)) if kind is int else repr(float(v)) for v in values]
    return values + ["nan", "inf", "-inf", "1.5" if kind is int else "x1"]


@pytest.fixture
def user(tmp_path, monkeypatch) -> Path:
    """The user's current folder: files, folders and special files of theirs that no command may touch."""
    home = tmp_path / "home"
    for rel, text in {"notes.txt": "mine", "data/a.txt": "a", "data/b.parquet": "not parquet",
                      "lookalike/agentprm.json": "{}", "lookalike/config.yaml": "my: config\n",
                      "lookalike/report.md": "# mine\n", "lookalike/tasks/train/my_notes.txt": "notes",
                      "lookalike/policy_0/weights.bin": "w", "lookalike/.stages/policy_0.done": "{}",
                      "empty.parquet": "", "garbage.parquet": "PAR1 but not", "garbage.json": "{not json",
                      "tasks/tasks.jsonl": '{"task_id": 5}\n', "fifo_tasks/placeholder": "",
                      "fifo_shards/placeholder": "", "config.yaml": "algo: agentprm\n"}.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    os.mkfifo(home / "fifo")
    os.mkfifo(home / "fifo_tasks" / "tasks.jsonl")
    os.mkfifo(home / "fifo_shards" / "x.parquet")
    os.symlink("notes.txt", home / "link")
    os.symlink("data", home / "dirlink")
    os.symlink("/dev/null", home / "devlink")
    os.symlink("nowhere", home / "dangling")
    monkeypatch.chdir(home)
    return home


def _hung(signum, frame):
    raise TimeoutError(f"no answer within {CASE_SECONDS} s (a read that blocks, or work that should not start)")


CASE_SECONDS = 60


def refused(argv: list[str], home: Path, capsys) -> str:
    before = tree(home)
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(CASE_SECONDS)
    try:
        code = main(argv)
    except SystemExit as e:   # argparse's own errors exit from parse_args
        code = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err.strip()
    assert code == 2, (argv, code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentprm") and "error:" in lines[0], (argv, err)
    assert "Traceback" not in err
    assert tree(home) == before, argv
    return lines[0]


# ------------------------------------------------------------------ numeric flags against the range table
FLAG_CASES = [(command, flag, value) for command, flag, kind, rule in numeric_flags() if rule is not None
              for value in bad_values(kind, rule)]


def test_every_numeric_flag_of_every_command_has_a_range():
    missing = [(command, flag) for command, flag, _, rule in numeric_flags() if rule is None]
    assert missing == [], f"numeric flags without a rule in agentprm/ranges.py: {missing}"
    assert {command for command, *_ in numeric_flags()} <= set(BASE)


@pytest.mark.parametrize("command, flag, value", FLAG_CASES, ids=lambda x: str(x))
def test_a_numeric_flag_outside_its_range(user, capsys, command, flag, value):
    line = refused([*BASE[command], flag, value], user, capsys)
    assert flag in line


_RULED = [(command, flag, kind, rule) for command, flag, kind, rule in numeric_flags() if rule is not None]


@st.composite
def out_of_range(draw):
    command, flag, kind, rule = draw(st.sampled_from(_RULED))
    below = st.floats(max_value=rule.low, exclude_max=not rule.low_open, allow_nan=False, allow_infinity=False,
                      min_value=-1e30)
    sides = [below] + ([st.floats(min_value=rule.high, exclude_min=not rule.high_open, max_value=1e30,
                                  allow_nan=False)] if rule.high < math.inf else [])
    value = draw(st.one_of(*sides))
    if kind is int:
        value = math.floor(value) if value < rule.low else math.ceil(value)
        if rule.holds(value):   # rounding brought it back in: step out by one
            value = value - 1 if value <= rule.low else value + 1
    return command, flag, str(value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=out_of_range())
def test_hypothesis_draws_out_of_range_values_from_the_rules(user, capsys, case):
    command, flag, value = case
    assert flag in refused([*BASE[command], flag, value], user, capsys)


# ------------------------------------------------------------------ argparse's own errors
ARGPARSE_CASES = ([[*argv[:2 if argv[0] in ("tasks", "targets") else 1]] for argv in BASE.values()     # missing
                   if argv[0] != "quickstart"]   # (it has no required argument: it would run)
                  + [[*argv, "--no-such-flag"] for argv in BASE.values()]                              # unknown
                  + [[*argv[:-1]] for argv in BASE.values()]                                          # flag, no value
                  + [["nope"], ["tasks", "nope"], ["targets", "nope"], ["--nope"],
                     ["tasks", "generate", "--out", "g", "--split", "train", "--num", "1", "--seed", "0x10"],
                     ["rollout", "--policy", "p", "--tasks", "t", "--out", "o", "--mode", "think"],
                     ["eval", "--policy", "p", "--tasks", "t", "--device", "gpu"],
                     ["eval", "--policy", "p", "--tasks", "t", "--dtype", "float7"],
                     ["train-prm", "--targets", "t", "--init", "i", "--out", "o", "--loss", "mse"],
                     ["tasks", "generate", "--out", "g", "--split", "test", "--num", "1"],
                     ["tasks", "generate", "--out", "g", "--split", "train", "--num", "1", "--types", "juggle"]])


@pytest.mark.parametrize("argv", ARGPARSE_CASES, ids=lambda a: " ".join(a))
def test_argument_errors_are_one_line(user, capsys, argv):
    refused(argv, user, capsys)


# ------------------------------------------------------------------ outputs that are not agentprm's to write
FOLDER_WRITERS = {   # the output flag last; inputs are the user's real-looking ones, so only the output refuses
    "rollout": ["rollout", "--policy", "random", "--tasks", "tasks", "--out"],
    "sft": ["sft", "--demos", "data/b.parquet", "--out"],
    "train-prm": ["train-prm", "--targets", "garbage.parquet", "--init", "tiny", "--out"],
    "train-policy": ["train-policy", "--policy", "p", "--prm", "q", "--rollouts", "r", "--out"],
    "tasks generate": ["tasks", "generate", "--split", "train", "--num", "1", "--out"],
    "loop": ["loop", "--config", "config.yaml", "--run-dir"],
    "quickstart": ["quickstart", "--out"],
}
FILE_WRITERS = {
    "demos": ["demos", "--tasks", "tasks", "--out"],
    "targets mc": ["targets", "mc", "--rollouts", "data/b.parquet", "--out"],
    "targets pairs": ["targets", "pairs", "--targets", "garbage.parquet", "--out"],
    "eval --json": ["eval", "--policy", "random", "--tasks", "tasks", "--json"],
    "rollout --json": ["rollout", "--policy", "random", "--tasks", "tasks", "--out", "fresh", "--json"],
    "loop --json": ["loop", "--config", "config.yaml", "--run-dir", "fresh", "--json"],
}
NOT_FOR_A_FOLDER = ["notes.txt", "fifo", "link", "devlink", "/dev/null", "notes.txt/sub", "data", "lookalike",
                    "dirlink", "", "data/a.txt/x"]
NOT_FOR_A_FILE = ["notes.txt", "fifo", "link", "devlink", "/dev/null", "notes.txt/sub.json", "data", "dirlink", "",
                  "dangling"]
OUTPUT_CASES = ([(name, [*argv, path]) for name, argv in FOLDER_WRITERS.items() for path in NOT_FOR_A_FOLDER]
                + [(name, [*argv, path]) for name, argv in FILE_WRITERS.items() for path in NOT_FOR_A_FILE])


@pytest.mark.parametrize("name, argv", OUTPUT_CASES, ids=lambda x: x if isinstance(x, str) else repr(x[-1]))
def test_an_output_that_is_not_agentprms_to_write(user, capsys, name, argv):
    refused(argv, user, capsys)


# ------------------------------------------------------------------ inputs
INPUT_CASES = [
    ["eval", "--policy", "random", "--tasks", "missing"], ["eval", "--policy", "random", "--tasks", "notes.txt"],
    ["eval", "--policy", "random", "--tasks", "data"], ["eval", "--policy", "random", "--tasks", "fifo_tasks"],
    ["eval", "--policy", "random", "--tasks", "tasks"], ["eval", "--policy", "data", "--tasks", "tasks"],
    ["eval", "--policy", "fifo", "--tasks", "tasks"], ["eval", "--policy", "missing", "--tasks", "tasks"],
    ["tasks", "list", "--tasks", "fifo_tasks"], ["tasks", "list", "--tasks", "fifo"], ["tasks", "list", "--tasks", "tasks"],
    ["play", "--game", "fifo"], ["play", "--game", "/dev/zero"], ["play", "--game", "garbage.json"],
    ["play", "--game", "data"], ["play", "--game", "missing"], ["play", "--game", "dangling"],
    ["sft", "--demos", "fifo", "--out", "pi"], ["sft", "--demos", "empty.parquet", "--out", "pi"],
    ["sft", "--demos", "garbage.parquet", "--out", "pi"], ["sft", "--demos", "fifo_shards", "--out", "pi"],
    ["sft", "--demos", "data", "--out", "pi"], ["sft", "--demos", "missing", "--out", "pi"],
    ["targets", "mc", "--rollouts", "fifo", "--out", "t.parquet"],
    ["targets", "mc", "--rollouts", "fifo_shards", "--out", "t.parquet"],
    ["targets", "mc", "--rollouts", "empty.parquet", "--out", "t.parquet"],
    ["targets", "mc", "--rollouts", "dangling", "--out", "t.parquet"],
    ["targets", "pairs", "--targets", "fifo", "--out", "p.parquet"],
    ["targets", "pairs", "--targets", "data", "--out", "p.parquet"],
    ["train-prm", "--targets", "fifo", "--init", "tiny", "--out", "prm"],
    ["train-prm", "--targets", "empty.parquet", "--init", "tiny", "--out", "prm"],
    ["train-prm", "--targets", "garbage.parquet", "--init", "data", "--out", "prm"],
    ["train-policy", "--policy", "data", "--prm", "data", "--rollouts", "data", "--out", "pi1"],
    ["train-policy", "--policy", "fifo", "--prm", "fifo", "--rollouts", "fifo", "--out", "pi1"],
    ["demos", "--tasks", "fifo_tasks", "--out", "d.parquet"], ["demos", "--tasks", "missing", "--out", "d.parquet"],
    ["rollout", "--policy", "random", "--tasks", "fifo_tasks", "--out", "r"],
    ["rollout", "--policy", "garbage.json", "--tasks", "tasks", "--out", "r"],
    ["serve", "--policy", "data"], ["serve", "--policy", "fifo"], ["serve", "--policy", "missing"],
]
# a missing parent folder of the output is made for the output's lock: a refused command must not leave it behind
INPUT_CASES += [
    ["sft", "--demos", "garbage.parquet", "--out", "new/a/pi"],
    ["targets", "mc", "--rollouts", "garbage.parquet", "--out", "new/b/t.parquet"],
    ["targets", "pairs", "--targets", "garbage.parquet", "--out", "new/c/p.parquet"],
    ["eval", "--policy", "random", "--tasks", "fifo_tasks", "--json", "new/d/x.json"],
    ["rollout", "--policy", "random", "--tasks", "fifo_tasks", "--out", "new/e/r"],
    ["demos", "--tasks", "fifo_tasks", "--out", "new/f/d.parquet"],
    ["train-prm", "--targets", "garbage.parquet", "--init", "tiny", "--out", "new/g/prm"],
    ["train-policy", "--policy", "data", "--prm", "data", "--rollouts", "data", "--out", "new/h/pi1"],
    ["tasks", "generate", "--split", "test", "--num", "1", "--out", "new/i/games"],
    ["loop", "--config", "garbage.json", "--run-dir", "new/j/run"],
    ["sft", "--demos", "empty.parquet", "--out", "pi", "--system-prompt", "word " * 5000],   # in every turn's prompt
]
# Outputs the operating system refuses: a legal 240-character name whose lock file's name passes 255 bytes, a path
# through a file, a folder where a file goes, a name past the OS limit. One line each (cli.py ENVIRONMENT_ERRNOS).
LONG = "n" * 240
OS_CASES = [
    ["targets", "mc", "--rollouts", "garbage.parquet", "--out", f"{LONG}.parquet"],
    ["demos", "--tasks", "tasks", "--out", f"{LONG}.parquet"],
    ["sft", "--demos", "garbage.parquet", "--out", LONG],
    ["eval", "--policy", "random", "--tasks", "tasks", "--json", f"{LONG}.json"],
    ["tasks", "layout", "--tasks", "tasks", "--out", "n" * 300 + ".json"],
    ["targets", "mc", "--rollouts", "garbage.parquet", "--out", "notes.txt/t.parquet"],
    ["reason", "problems", "--out", "p" * 300 + ".jsonl", "--split", "train", "--num", "1"],
]


@pytest.mark.parametrize("argv", OS_CASES, ids=lambda a: f"{a[0]} {a[-1][:20]}")
def test_an_output_the_operating_system_refuses(user, capsys, argv):
    refused(argv, user, capsys)


def test_something_else_where_an_outputs_lock_goes(user, capsys):
    """A FIFO (the read would block), a folder or a symlink where the lock file goes is refused, and left there."""
    os.mkfifo(user / ".t.parquet.agentprm-lock")
    (user / ".u.parquet.agentprm-lock").mkdir()
    os.symlink("notes.txt", user / ".v.parquet.agentprm-lock")
    for out in ("t.parquet", "u.parquet", "v.parquet"):
        line = refused(["targets", "mc", "--rollouts", "garbage.parquet", "--out", out], user, capsys)
        assert "in the way of its lock" in line


@pytest.mark.parametrize("env", [{"RANK": "abc"}, {"WORLD_SIZE": "abc"}, {"RANK": "1"}, {"RANK": "-1"},
                                 {"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": "9" * 5000, "WORLD_SIZE": "2"}])
def test_a_launch_environment_no_launcher_would_set(user, capsys, monkeypatch, env):
    """$RANK / $WORLD_SIZE that are not numbers, or a rank not below the size (RANK=1 alone wrote nothing, took no
    lock and exited 0), are one line before any work."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert "$" in refused(["targets", "mc", "--rollouts", "garbage.parquet", "--out", "t.parquet"], user, capsys)


CONFIGS = {
    "repeated key": "seed: 1\nseed: 2\n", "alias": "a: &x {train: 3}\ntasks: *x\n", "a list": "- 1\n- 2\n",
    "a string": "just words\n", "unknown field": "algo: agentprm\ncolour: blue\n", "unknown section field":
    "tasks: {trian: 3}\n", "wrong type": "iterations: two\n", "nested wrong type": "tasks: 5\n",
    "bool for int": "iterations: true\n", "unknown algo": "algo: magic\n", "tab indent": "tasks:\n\ttrain: 3\n",
    "not utf-8": b"seed: \xff\n", "null section": "tasks: null\n", "NaN": "targets: {gamma: .nan}\n",
    "inf lr": "policy: {lr: .inf}\n", "huge seed": "seed: 100000000000000000000000000\n",
    "merge key": "base: &b {train: 2}\ntasks: {<<: *b}\n", "unknown loss": "prm: {loss: hinge}\n",
    "list for mapping": "eval: [1, 2]\n", "number for a list": "tasks: {types: 5}\n",
    "number in a list of names": "tasks: {types: [5]}\n", "name in a list of numbers": "eval: {best_of_n: [a]}\n",
    "fraction in a list of counts": "eval: {best_of_n: [2.5]}\n", "NaN in a list": "eval: {best_of_n: [.nan]}\n",
    "huge count in a list": "eval: {best_of_n: [1000000000000]}\n", "numbers as stop strings":
    "decoding: {stop: [1, 2]}\n", "fractional count": "iterations: 2.5\n", "unknown prompt format": "policy0: {sft: {prompt: {format: xml}}}\n",
}


@pytest.mark.parametrize("argv", INPUT_CASES, ids=lambda a: " ".join(a))
def test_an_input_that_is_missing_empty_garbage_or_blocking(user, capsys, argv):
    refused(argv, user, capsys)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_loop_config_that_is_not_what_it_claims(user, capsys, name):
    text = CONFIGS[name]
    (user / "bad.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    line = refused(["loop", "--config", "bad.yaml", "--run-dir", "run"], user, capsys)
    assert "bad.yaml" in line


# ------------------------------------------------------------------ model folders (the bundled π0, spoiled one way each)
MODEL_SPOILS = {
    "template escapes the sandbox": ("chat_template.jinja", "{{ ''.__class__.__mro__[1].__subclasses__() }}"),
    "template loops too far": ("chat_template.jinja", "{% for x in range(10**9) %}{{ x }}{% endfor %}"),
    "template raises": ("chat_template.jinja", "{{ raise_exception('no system role') }}"),
    "template does not parse": ("chat_template.jinja", "{% for %}"),
    "config is not JSON": ("config.json", "{not json"),
    "config names an unknown architecture": ("config.json", '{"model_type": "no-such-model"}'),
    "weights are garbage": ("model.safetensors", "garbage"),
    "tokenizer is garbage": ("tokenizer.json", "{not json"),
    "agentprm.json is garbage": ("agentprm.json", "{not json"),
    "an adapter whose base is itself": ("adapter_config.json",
                                        '{"peft_type": "LORA", "base_model_name_or_path": ".", "r": 2}'),
}


@pytest.mark.parametrize("spoil", list(MODEL_SPOILS))
def test_a_spoiled_model_folder(user, capsys, generated_tasks, spoil):
    import shutil

    from agentprm.loop.run import DEFAULT_POLICY

    name, text = MODEL_SPOILS[spoil]
    shutil.copytree(DEFAULT_POLICY, user / "pi")
    (user / "pi" / name).write_text(text)
    line = refused(["eval", "--policy", "pi", "--tasks", str(generated_tasks.eval), "--max-steps", "2"], user, capsys)
    assert "pi" in line


# ------------------------------------------------------------------ official-layout task folders with odd content
GAME = '{"pddl_domain": "d", "grammar": "g", "pddl_problem": "p", "solvable": true}'
OFFICIAL_SPOILS = {   # (traj_data.json, game.tw-pddl) of the one trial; None: a FIFO
    "traj_data is a list": ("[1, 2]", GAME),
    "game is a list": ('{"task_type": "pick_and_place_simple"}', "[1]"),
    "traj_data is not JSON": ("{oops", GAME),
    "game is not JSON": ('{"task_type": "pick_and_place_simple"}', "{oops"),
    "scene is a string": ('{"task_type": "pick_and_place_simple", "scene": "kitchen"}', GAME),
    "floor plan has no number": ('{"task_type": "pick_and_place_simple", "scene": {"floor_plan": "--"}}', GAME),
    "traj_data is not UTF-8": (b'{"task_type": "\xff"}', GAME),
    "game is a FIFO": ('{"task_type": "pick_and_place_simple"}', None),
    "traj_data is a FIFO": (None, GAME),
    "game grammar is broken": ('{"task_type": "pick_and_place_simple"}', GAME),
}


@pytest.mark.parametrize("spoil", list(OFFICIAL_SPOILS))
def test_an_official_layout_folder_with_odd_content(user, capsys, spoil):
    trial = user / "json_2.1.1" / "valid_seen" / "pick_and_place_simple-Apple-None-Fridge-1" / "trial_1"
    trial.mkdir(parents=True)
    for name, content in zip(("traj_data.json", "game.tw-pddl"), OFFICIAL_SPOILS[spoil]):
        if content is None:
            os.mkfifo(trial / name)
        else:
            (trial / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    refused(["eval", "--policy", "random", "--tasks", "json_2.1.1", "--max-steps", "2", "--workers", "1"], user, capsys)


# ------------------------------------------------------------------ records whose values are out of range or missing
def _rollouts(path: Path, **spoil) -> None:
    """Two one-step episodes as `rollout` writes them, with `spoil` = {column: value} set on every row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentprm.data.trajectories import EpisodeRecord, StepRecord, write_episodes_file

    episodes = [EpisodeRecord(f"e{k}", "t0", "pick_and_place_simple", "put some apple on cabinet.", "synthetic", 0,
                              [StepRecord(0, "You are in a room.", ("look",), "look", float(k), True, bool(k))])
                for k in (0, 1)]
    write_episodes_file(path, episodes)
    table = pq.read_table(path)
    for column, value in spoil.items():
        kind = table.schema.field(column).type if column in table.column_names else pa.string()
        values = pa.array([value] * len(table), type=kind if value is None or column in table.column_names
                          and not isinstance(value, str) or kind == pa.string() else pa.string())
        table = (table.set_column(table.column_names.index(column), column, values) if column in table.column_names
                 else table.append_column(column, values))
    pq.write_table(table, path)


RECORD_SPOILS = {"reward of 1000": {"reward": 1000.0}, "reward of -5": {"reward": -5.0},
                 "NaN reward": {"reward": float("nan")}, "null action": {"action": None},
                 "unknown origin": {"origin": "teleport"}, "reward as text": {"reward": "lots"},
                 "negative turn": {"turn": -3}, "null episode id": {"episode_id": None}}


@pytest.mark.parametrize("spoil", list(RECORD_SPOILS))
@pytest.mark.parametrize("argv", [["targets", "mc", "--rollouts", "r.parquet", "--out", "t.parquet"],
                                  ["sft", "--demos", "r.parquet", "--out", "pi"]], ids=lambda a: a[0])
def test_a_trajectory_record_out_of_range(user, capsys, spoil, argv):
    _rollouts(user / "r.parquet", **RECORD_SPOILS[spoil])
    assert "r.parquet" in refused(argv, user, capsys)


@pytest.mark.parametrize("spoil", [{"admissible": [None, "look"]}, {"candidate_scores": [float("nan")]}],
                         ids=["null command", "NaN score"])
def test_a_list_item_that_is_missing_or_not_a_number(user, capsys, spoil):
    """Inside a list column too: a null admissible command (a TypeError in sft) or a NaN candidate score."""
    _rollouts(user / "r.parquet", **spoil)
    assert "no item of a list" in refused(["sft", "--demos", "r.parquet", "--out", "pi"], user, capsys)


def test_targets_outside_zero_one_and_empty_tables_are_refused(user, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentprm.data.tables import TARGETS_SCHEMA

    row = {"state_key": "s", "action": "look", "q": 7.0, "visits": 1, "task_id": "t0",
           "task_type": "pick_and_place_simple", "episode_id": "e0", "turn": 0}
    pq.write_table(pa.Table.from_pylist([row], schema=TARGETS_SCHEMA), user / "q7.parquet")
    pq.write_table(pa.Table.from_pylist([], schema=TARGETS_SCHEMA), user / "none.parquet")
    for name in ("q7.parquet", "none.parquet"):
        assert name in refused(["targets", "pairs", "--targets", name, "--out", "p.parquet"], user, capsys)
        assert name in refused(["train-prm", "--targets", name, "--init", "tiny", "--out", "prm"], user, capsys)
    from agentprm.data.trajectories import write_episodes_file

    write_episodes_file(user / "no-episodes.parquet", [])   # a rollout file with no episode: no 0-row targets file
    assert "no targets" in refused(["targets", "mc", "--rollouts", "no-episodes.parquet", "--out", "t.parquet"], user,
                                   capsys)


def test_the_battery_has_at_least_300_cases():
    cases = (len(FLAG_CASES) + len(ARGPARSE_CASES) + len(OUTPUT_CASES) + len(INPUT_CASES) + len(OS_CASES) + len(CONFIGS)
             + len(MODEL_SPOILS) + len(OFFICIAL_SPOILS) + 2 * len(RECORD_SPOILS) + 17)
    assert cases >= 300, cases


@pytest.mark.parametrize("text", ['{"task_id": ' + "9" * 5000 + "}\n", "[" * 100_000 + "\n"],
                         ids=["5,000-digit number", "100,000-deep nesting"])
def test_json_past_pythons_limits_is_one_line(user, capsys, text):
    """Every JSON reader goes through io.parse_json: a number past the 4,300-digit limit or nesting past the parser's
    stack is a one-line error naming the file and line, in a task manifest, a problems file and a run's results."""
    (user / "big").mkdir()
    (user / "big" / "tasks.jsonl").write_text(text)
    (user / "big" / "problems.jsonl").write_text(text)
    (user / "big" / "results.json").write_text(text)
    assert "big/tasks.jsonl:1: not valid JSON" in refused(["tasks", "list", "--tasks", "big"], user, capsys)
    assert "problems.jsonl:1: not valid JSON" in refused(
        ["reason", "eval", "--model", "m", "--problems", "big/problems.jsonl"], user, capsys)
    assert "results.json: not valid JSON" in refused(["view", "big", "--out", "page.html"], user, capsys)
    (user / "big.yaml").write_text("seed: " + "9" * 5000 + "\n")
    assert "big.yaml: not valid YAML" in refused(["loop", "--config", "big.yaml", "--run-dir", "run"], user, capsys)


def test_a_run_folder_inside_a_folder_the_run_reads(user, capsys, generated_tasks):
    """A run dir inside its own train or eval task folder (or π0's folder) would write into what it reads: refused
    before any work, the task folder unchanged."""
    import shutil

    shutil.copytree(generated_tasks.eval, user / "games")
    for field in ("train_dir", "eval_dir"):
        (user / "c.yaml").write_text(f"tasks: {{{field}: games}}\n")
        line = refused(["loop", "--config", "c.yaml", "--run-dir", "games/run"], user, capsys)
        assert f"tasks.{field} games" in line


def test_a_terminal_that_cannot_show_a_paths_characters(tmp_path):
    """With PYTHONIOENCODING=ascii, a non-ASCII output name is printed escaped: the command ends 0 with its output
    written, not with a UnicodeEncodeError after the work."""
    import subprocess
    import sys

    _rollouts(tmp_path / "r.parquet")
    done = subprocess.run([sys.executable, "-m", "agentprm", "targets", "mc", "--rollouts", "r.parquet", "--out",
                           "é.parquet"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "\\xe9.parquet" in done.stdout and (tmp_path / "é.parquet").is_file()
