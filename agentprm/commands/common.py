"""Options every command shares: --seed, --json PATH (machine-readable summary with provenance)."""
from __future__ import annotations

import argparse

from agentprm.io import provenance, write_json


def add_common(p: argparse.ArgumentParser, seed: int = 0) -> None:
    p.add_argument("--seed", type=int, default=seed, help=f"random seed (default {seed})")
    p.add_argument("--json", metavar="PATH", help="write a machine-readable summary here")


def write_summary(args: argparse.Namespace, summary: dict) -> None:
    if getattr(args, "json", None):
        config = {k: v for k, v in vars(args).items() if k not in ("func",)}
        write_json(args.json, {**summary, "provenance": provenance(config, getattr(args, "seed", None))})
