"""Every numeric setting has a declared range (agentprm/ranges.py), and an out-of-range value of any of them is a
one-line error naming it — from a loop config file and from every command's generated flags — before any work
(validate before work)."""
from __future__ import annotations

import argparse
import math

import pytest

from agentprm.errors import UserError
from agentprm.loop.config import LoopConfig, from_dict
from agentprm.prm.config import PrmDataConfig
from agentprm.ranges import Range, numeric_fields, rule_for


def out_of_range(rule: Range) -> float:
    if rule.high < math.inf:
        return rule.high if rule.high_open else rule.high + 1
    return rule.low if rule.low_open else rule.low - 1


def test_every_numeric_field_of_every_section_has_a_range():
    for section in (LoopConfig, PrmDataConfig):
        missing = [path for path, cls, name in numeric_fields(section) if rule_for(cls, name) is None]
        assert missing == [], f"numeric fields without a range in agentprm/ranges.py: {missing}"


def test_range_bounds():
    assert Range(0, low_open=True).holds(1e-9) and not Range(0, low_open=True).holds(0.0)
    assert Range(0, 1).holds(1.0) and not Range(0, 1, high_open=True).holds(1.0)
    assert not Range(0).holds(float("nan")) and str(Range(0, 1, high_open=True)) == "in [0, 1)"


@pytest.mark.parametrize("path", [p for p, _, _ in numeric_fields(LoopConfig)])
def test_a_config_file_value_out_of_range_is_refused_naming_the_field(path):
    cls, name = next((c, n) for p, c, n in numeric_fields(LoopConfig) if p == path)
    data: dict = {}
    node = data
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = out_of_range(rule_for(cls, name))
    with pytest.raises(UserError, match=rf"^c\.yaml: field '{path}' must be "):
        from_dict(data, "c.yaml")


COMMANDS = {   # the required arguments of each command with generated flags (nothing is read: the check comes first)
    "sft": ["sft", "--demos", "d", "--out", "o"],
    "rollout": ["rollout", "--policy", "p", "--tasks", "t", "--out", "o"],
    "eval": ["eval", "--policy", "p", "--tasks", "t"],
    "targets mc": ["targets", "mc", "--rollouts", "r", "--out", "o"],
    "train-prm": ["train-prm", "--targets", "t", "--init", "i", "--out", "o"],
    "train-policy": ["train-policy", "--policy", "p", "--prm", "q", "--rollouts", "r", "--out", "o"],
    "quickstart": ["quickstart", "--out", "o"],
    "serve-prm": ["serve-prm", "--prm", "q"],
}


def generated_flags():
    from agentprm.cli import build_parser

    parser = build_parser()
    for command, argv in COMMANDS.items():
        args = parser.parse_args(argv)
        for cls, prefix, names in args._sections:
            for path, section, name in numeric_fields(cls):
                if path in names:
                    yield command, argv, section, name, prefix + name


@pytest.mark.parametrize("command,argv,section,name,dest", list(generated_flags()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_a_flag_out_of_range_is_a_one_line_error_before_work(command, argv, section, name, dest, tmp_path, capsys,
                                                             monkeypatch):
    from agentprm.cli import main

    monkeypatch.chdir(tmp_path)   # nothing may be written: the folder stays empty
    flag = f"--{dest.replace('_', '-')}"
    bad = out_of_range(rule_for(section, name))
    value = str(int(bad)) if float(bad).is_integer() else str(bad)
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"agentprm {argv[0]}") and f"{flag} must be " in err[0]
    assert list(tmp_path.iterdir()) == []


def test_every_command_with_generated_flags_is_covered():
    from agentprm.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    with_flags = {name for name, p in sub.choices.items() if p.get_default("_sections")}
    assert with_flags == {c.split()[0] for c in COMMANDS} - {"targets"}   # `targets mc` has them one level down
    assert {c for c, *_ in generated_flags()} == set(COMMANDS)


@pytest.mark.parametrize("argv, flag", [
    (["eval", "--policy", "p", "--tasks", "t", "--best-of", "0"], "--best-of"),
    (["eval", "--policy", "p", "--tasks", "t", "--beam-width", "-1"], "--beam-width"),
    (["eval", "--policy", "p", "--tasks", "t", "--beam-expand", "0"], "--beam-expand"),
    (["eval", "--policy", "p", "--tasks", "t", "--temperature", "inf"], "--temperature"),
    (["eval", "--policy", "p", "--tasks", "t", "--seed", "-1"], "--seed"),
    (["eval", "--policy", "p", "--tasks", "t", "--seed", str(10**26)], "--seed"),
    (["demos", "--tasks", "t", "--out", "o.parquet", "--per-task", "0"], "--per-task"),
    (["sft", "--demos", "d", "--out", "o", "--time-budget", "-5"], "--time-budget"),
    (["sft", "--demos", "d", "--out", "o", "--time-budget", "nan"], "--time-budget"),
    (["sft", "--demos", "d", "--out", "o", "--lr", "inf"], "--lr"),
    (["sft", "--demos", "d", "--out", "o", "--threads", "100000"], "--threads"),
    (["train-prm", "--targets", "t", "--init", "i", "--out", "o", "--time-budget", "-1"], "--time-budget"),
    (["tasks", "generate", "--out", "o", "--split", "train", "--num", "0"], "--num"),
])
def test_a_commands_own_flags_go_through_the_same_table(argv, flag, tmp_path, capsys, monkeypatch):
    """flags written by hand outside the generated sections (--best-of 0, --beam-width -1, a seed of
    10**26, a budget of NaN, an infinite learning rate or temperature, 100000 threads) ran, crashed or segfaulted."""
    from agentprm.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} must be " in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_non_finite_loss_stops_training_before_anything_is_saved(tmp_path):
    """`--lr inf` (now refused up front) trained and saved a NaN model with exit 0: the loop itself stops at the
    first non-finite loss, so no stage can save one."""
    import torch

    from agentprm.train.config import TrainConfig
    from agentprm.train.core import train

    model = torch.nn.Linear(2, 1)

    def loss_fn(m, batch):
        out = m(torch.ones(len(batch), 2)).mean()
        return out * float("nan") if len(calls) >= 3 else out, {}

    calls: list = []
    with pytest.raises(UserError, match="the loss is nan at step 3"):
        train(model, list(range(8)), lambda m, b: (calls.append(1), loss_fn(m, b))[1],
              TrainConfig(steps=10, batch_size=2, lr=1e-3), progress=False)
    assert len(calls) == 3
