"""Every command's --help renders (argparse fails at help time on a stray % in a help string)."""
import pytest

from agentprm.cli import build_parser, main


def commands():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def test_top_level_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in ("tasks", "demos", "play", "sft", "rollout", "eval", "targets", "train-prm", "loop", "quickstart"):
        assert name in out


@pytest.mark.parametrize("name", commands())
def test_command_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    assert f"usage: agentprm {name}" in capsys.readouterr().out
