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


def test_help_and_model_free_commands_import_neither_torch_nor_transformers(tmp_path):
    """`--help` of every command and the commands that need no model start without torch/transformers
    (~9 s of imports before; bench/cli_startup.py measures it)."""
    import subprocess
    import sys

    from agentprm.data.trajectories import EpisodeRecord, StepRecord, write_episodes_file

    episodes = [EpisodeRecord(f"e{k}", "t0", "pick_and_place_simple", "put some apple on cabinet.", "synthetic", 0,
                              [StepRecord(0, "You are in a room.", (), "look", float(k), True, bool(k))])
                for k in (0, 1)]
    rollouts = write_episodes_file(tmp_path / "rollouts.parquet", episodes)
    script = f"""
import sys
from agentprm.cli import build_parser, main
parser = build_parser()
for name in {commands()!r}:
    try:
        main([name, "--help"])
    except SystemExit:
        pass
assert main(["targets", "mc", "--rollouts", {str(rollouts)!r}, "--out", {str(tmp_path / "q.parquet")!r}]) == 0
print(sorted(m for m in ("torch", "transformers", "peft", "accelerate") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_run_command_runs_a_command_and_stops_a_script_on_failure(tmp_path, capsys):
    """Study scripts run commands through cli.run_command: a child process, echoed, and a failure ends the script with
    the command line and (quiet) its one-line error, not a traceback of the script."""
    from agentprm.cli import run_command

    run_command("targets", "--help", quiet=True)
    with pytest.raises(SystemExit) as e:
        run_command("targets", "mc", "--rollouts", tmp_path / "missing.parquet", "--out", tmp_path / "q.parquet",
                    quiet=True)
    message = str(e.value.code)
    assert message.startswith(f"failed (exit 2): agentprm targets mc --rollouts {tmp_path / 'missing.parquet'}")
    assert "missing.parquet" in message.splitlines()[-1] and "error" in message.splitlines()[-1]
    assert not (tmp_path / "q.parquet").exists()
    run_command("targets", "--help")
    assert capsys.readouterr().out.startswith("$ agentprm targets --help\n")
