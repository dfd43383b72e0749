"""`agentprm` command line. Each sub-command lives in `agentprm/commands/<name>.py` and exposes
`register(subparsers)`, which adds its parser and sets `func(args) -> int`. Bad input raises `UserError`,
printed here as one line with exit code 2."""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import subprocess
import sys

from agentprm import __version__
from agentprm.errors import UserError

# OSErrors that are the machine's state, not a bug: a full disk or quota, a folder without write permission, a
# read-only file system. Atomic writes (io.atomic_path) leave nothing half-written when they strike.
# OS errors that say something of the machine or of a path the user gave, not of agentprm: one line, no traceback
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG,
                      errno.EISDIR, errno.ENOTDIR, errno.EFBIG, errno.ELOOP, errno.EMFILE, errno.ENFILE,
                      errno.EADDRINUSE, errno.EADDRNOTAVAIL}
COMMANDS = ["tasks", "demos", "play", "sft", "rollout", "eval", "targets", "train_prm", "train_policy", "loop", "serve",
            "serve_prm", "view", "reason"]


class OneLineErrors(argparse.ArgumentParser):
    """argparse's own errors (a missing argument, `--seed abc`) as one line with exit code 2, like every other refusal:
    argparse prints the whole usage first, a dozen lines a script's log cannot tell from output. Sub-command parsers
    inherit the class (`add_subparsers` builds its parsers with the parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="agentprm", description="Process reward models for multi-turn LLM agents "
                                     "(AgentPRM, arXiv 2502.10325) on ALFWorld.")
    parser.add_argument("--version", action="version", version=f"agentprm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"agentprm.commands.{name}").register(sub)
    return parser


def _quiet_libraries() -> None:
    """Our own progress bars and tables are the output; transformers' per-load bars and reports are noise. Said
    through the environment when transformers is not loaded yet, so that commands without a model never load it."""
    if "transformers" not in sys.modules:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    # Parse before anything imports fast_downward: its pddl2sas overwrites sys.argv.
    for stream in (sys.stdout, sys.stderr):   # a terminal that cannot show a path's characters (PYTHONIOENCODING=ascii)
        if hasattr(stream, "reconfigure"):    # gets them escaped, not a UnicodeEncodeError after the work is done
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    _quiet_libraries()
    try:
        from agentprm.commands.common import check_flags, checkpointed, tracked
        from agentprm.outputs import launch_env, prepared

        check_flags(args)
        launch_env()   # $RANK / $WORLD_SIZE no launcher would set: refused before any work
        if getattr(args, "_placed", False):   # a command that runs models (commands/common.py add_device_flags)
            from agentprm.commands.common import config_from_args
            from agentprm.models.device import DeviceConfig, use_device

            use_device(config_from_args(DeviceConfig, args))
        # every output checked (agentprm/outputs.py) and locked before any work; then the trackers and the
        # trainings' checkpoints, when the command has them
        with prepared(args), tracked(args), checkpointed(args):
            return int(args.func(args) or 0)
    except UserError as e:   # one line, whatever the message quotes from the input
        print(f"agentprm {args.command}: error: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in ENVIRONMENT_ERRNOS:   # anything else is a bug: its traceback is wanted
            raise
        print(f"agentprm {args.command}: error: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run_command(*argv, quiet: bool = False) -> None:
    """`agentprm <argv>` from a study script, in a child process as from a shell: one command's process-wide settings
    (device placement, env pool) and memory do not carry into the next, and several may run at once. Echoed first
    unless `quiet` (which drops its output); a failure ends the script naming the command, and when quiet the end of
    its error output."""
    args = [str(a) for a in argv]
    if not quiet:
        print("$ agentprm", " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "agentprm", *args], stdout=subprocess.DEVNULL if quiet else None,
                            stderr=subprocess.PIPE if quiet else None, text=True)
    if result.returncode:
        sys.exit(f"failed (exit {result.returncode}): agentprm {' '.join(args)}"
                 + (f"\n{result.stderr[-2000:]}" if quiet else ""))


if __name__ == "__main__":
    sys.exit(main())
