"""Options every command shares: --seed, --json PATH (machine-readable summary with provenance); and the flags of a
stage's config section, generated from its dataclass so that a setting, its default and its doc are declared once."""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from agentprm.io import provenance, write_json
from agentprm.outputs import declare
from agentprm.tracking import TrackingConfig, tracking
from agentprm.train.checkpoint import discard, resumable


def add_common(p: argparse.ArgumentParser, seed: int = 0) -> None:
    p.add_argument("--seed", type=int, default=seed, help=f"random seed (default {seed})")
    add_json_flags(p)


def add_max_errors(p: argparse.ArgumentParser) -> None:
    """--max-errors: one rule for every command that plays episodes (eval, rollout, demos): an episode whose env
    failed (a broken game, a lost worker) is kept as a failure with its error, and the command exits 2 when more than
    N did (data/summary.py `check_env_errors`, after the outputs are written)."""
    p.add_argument("--max-errors", type=int, default=0, metavar="N",
                   help="exit 2 when more than N episodes hit an env error (a broken game, a lost worker); they "
                        "count as failures (default 0)")


def add_json_flags(p: argparse.ArgumentParser) -> None:
    """--json PATH, and --overwrite for output files that exist and that agentprm did not write (agentprm/outputs.py)."""
    p.add_argument("--json", metavar="PATH", help="write a machine-readable summary here")
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing output files agentprm did not write (never folders)")
    declare(p, {"json": "file:summary"})


def add_device_flags(p: argparse.ArgumentParser) -> None:
    """--device/--dtype/--threads (models/device.py DeviceConfig) for a command that runs models; cli.main places
    the process before the command runs, so a missing GPU is a one-line error before any work."""
    from agentprm.models.device import DeviceConfig

    add_config_flags(p, DeviceConfig)
    p.set_defaults(_placed=True)


def write_summary(args: argparse.Namespace, summary: dict) -> None:
    """The --json summary with its provenance, and what was changed to make a model folder usable (a tokenizer
    without pad token or chat template: models/presets.py `prepare_tokenizer`)."""
    from agentprm.train.distributed import is_main

    if getattr(args, "json", None) and is_main():   # one summary per data-parallel launch
        config = {k: v for k, v in vars(args).items() if k not in ("func",)}
        presets = sys.modules.get("agentprm.models.presets")   # never imported here: a model-free command stays so
        notes = {"model_notes": list(presets.NOTES)} if presets and presets.NOTES else {}
        write_json(args.json, {**summary, **notes, "provenance": provenance(config, getattr(args, "seed", None))})


@lru_cache(maxsize=None)
def field_docs(cls) -> dict[str, str]:
    """Each field's `#` comment in the dataclass source, continuation comment lines joined."""
    names, docs, current = {f.name for f in dataclasses.fields(cls)}, {}, None
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+): [^#]*?(?:#\s*(.*))?$", line)
        if m and m.group(1) in names:
            current, docs[m.group(1)] = m.group(1), (m.group(2) or "").strip()
        elif current and line.strip().startswith("#"):
            docs[current] += " " + line.strip()[1:].strip()
        else:
            current = None
    return docs


def add_config_flags(p: argparse.ArgumentParser, cls, only: Iterable[str] | None = None, skip: Iterable[str] = (),
                     choices: Mapping[str, Iterable[str]] | None = None, prefix: str = "") -> None:
    """`--field-name` for each field of the config dataclass `cls` (all, or `only`, minus `skip`): its default, type
    and doc comment come from the dataclass, the one place they are declared (the loop's YAML section is the same
    class). Booleans get --flag / --no-flag. A nested section's fields get its name as a prefix (`lora.r` ->
    `--lora-r`, dest `lora_r`)."""
    defaults, docs, choices, hints = cls(), field_docs(cls), choices or {}, typing.get_type_hints(cls)
    generated: list[str] = []   # range-checked against agentprm/ranges.py before the command runs (check_flags)
    p.set_defaults(_sections=[*(p.get_default("_sections") or []), (cls, prefix, generated)])
    for f in dataclasses.fields(cls):
        if (only is not None and f.name not in only) or f.name in skip:
            continue
        generated.append(f.name)
        default, name = getattr(defaults, f.name), prefix + f.name
        if dataclasses.is_dataclass(default):
            add_config_flags(p, type(default), prefix=f"{name}_")
            continue
        shown = "" if default is None else f" (default {default})"   # a None default is described by its doc
        kwargs: dict[str, Any] = {"default": default, "dest": name, "help": f"{docs.get(f.name, '')}{shown}".strip()}
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]   # int | None -> int, list[int] -> int
        if hint is bool or args == [bool]:   # bool | None: neither flag given keeps None ("as before")
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(hint) is list:
            kwargs.update(nargs="*", type=args[0])
        else:
            kwargs["type"] = args[0] if args else hint
        if f.name in choices:
            kwargs["choices"] = list(choices[f.name])
        p.add_argument(f"--{name.replace('_', '-')}", **kwargs)


def config_from_args(cls, args: argparse.Namespace, prefix: str = "", **fixed):
    """The `cls` instance the flags of `add_config_flags` describe (fields without a flag keep their defaults, or
    take `fixed`); nested sections are read from their prefixed flags."""
    defaults, given = cls(), {}
    for f in dataclasses.fields(cls):
        name, default = prefix + f.name, getattr(defaults, f.name)
        if f.name in fixed:
            continue
        if dataclasses.is_dataclass(default):
            if any(hasattr(args, f"{name}_{g.name}") for g in dataclasses.fields(default)):
                given[f.name] = config_from_args(type(default), args, prefix=f"{name}_")
        elif hasattr(args, name):
            given[f.name] = getattr(args, name)
    return cls(**{**given, **fixed})


def check_flags(args: argparse.Namespace) -> None:
    """The value of every flag `add_config_flags` generated against its range (agentprm/ranges.py): a one-line
    UserError naming the flag, before any work."""
    from agentprm.ranges import RULES, Range, check_value

    checked = set()
    for cls, prefix, names in getattr(args, "_sections", None) or []:
        for name in names:
            dest = prefix + name
            checked.add(dest)
            check_value(cls, name, getattr(args, dest, None), lambda d=dest: f"--{d.replace('_', '-')}")
    labels = getattr(args, "_labels", None) or {}
    for dest, value in vars(args).items():   # a command's own flags (--seed, --best-of, ...): the same table by name
        if dest not in checked and dest in RULES:
            check_value(Range, dest, value, lambda d=dest: labels.get(d, f"--{d.replace('_', '-')}"))


def add_tracking_flags(p: argparse.ArgumentParser, by_cli: bool = True) -> None:
    """--report-to, --report-every, --project, --logging-dir (agentprm/tracking.py TrackingConfig). With `by_cli`,
    `cli.main` opens the trackers around the command (`tracked`), logging under ./tracking unless --logging-dir;
    the quickstart instead hands them to its loop, which logs under its run folder."""
    add_config_flags(p, TrackingConfig)
    p.set_defaults(_tracked=by_cli)


def tracked(args: argparse.Namespace):
    """The command's trackers while it runs (nothing to open without --report-to)."""
    if not getattr(args, "_tracked", False):
        return nullcontext()
    config = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in vars(args).items()
              if not k.startswith("_") and k != "func"}
    return tracking(config_from_args(TrackingConfig, args), Path("tracking"), args.command,
                    {**config, "provenance": provenance(config, getattr(args, "seed", None))})


def add_checkpoint_flags(p: argparse.ArgumentParser) -> None:
    """--checkpoint-every-s: a training command killed mid-way resumes where it was when run again (cli.main opens
    the checkpoints beside --out: `checkpointed`)."""
    p.add_argument("--checkpoint-every-s", type=float, default=600.0, metavar="S",
                   help="save the training's state (weights, optimizer, scheduler, RNG) every S seconds beside --out, "
                        "so the same command run again after a kill resumes there; 0 = off (default 600)")
    p.set_defaults(_checkpointed=True)


@contextmanager
def checkpointed(args: argparse.Namespace):
    """The command's trainings keep their checkpoints in `.<out>.agentprm-training/` beside --out, deleted once the
    command has succeeded (its output is in place)."""
    if not getattr(args, "_checkpointed", False):
        yield
        return
    out = Path(args.out)
    root = out.absolute().parent / f".{out.name}.agentprm-training"
    with resumable(root, args.checkpoint_every_s):
        yield
    discard(root)
