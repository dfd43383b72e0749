"""Build the default policy π0 with a fixed seed: train games → expert demos → SFT → held-out eval.

    python scripts/build_default_policy.py --quick                 # ~6 min: a smoke check of the recipe
    python scripts/build_default_policy.py                         # the shipped setting (~80 min, see below)
    python scripts/build_default_policy.py --out DIR --work DIR    # keep intermediate files; reruns reuse them

Every stage is the `agentprm` command a user would run (tasks generate, demos, sft, eval), so the recipe is the
documentation. Train games come from the train floor plans, eval games from the disjoint eval floor plans. The
policy folder gets `eval.json` (success rate, Wilson 95% CI, per task type, provenance) next to the model.
Individual settings can be overridden (--train-games, --epochs, ...) to try levers; the defaults are what ships.
Measured on 2 CPU cores, full setting: 480 games 28 min, their expert demos (10 k steps) 24 min, SFT 22 min
(6,150 steps at ~4.7 steps/s on both cores), eval of 36 held-out episodes ~2 min.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from agentprm.cli import run_command

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "agentprm" / "assets" / "policy"
SETTINGS = {
    "quick": dict(train_games=24, eval_games=12, model="tiny", epochs=1.0, time_budget=120.0, renumber_copies=0),
    # full: 5 epochs over 480 games' demos plus one renumbered copy = 6,150 steps; no time budget, so the result
    # does not depend on the machine's speed (~22 min on 2 free cores)
    "full": dict(train_games=480, eval_games=36, model="tiny", epochs=5.0, time_budget=0.0, renumber_copies=1),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"policy folder (default {DEFAULT_OUT})")
    p.add_argument("--quick", action="store_true", help="small setting that runs in minutes")
    p.add_argument("--work", type=Path, help="folder for games and demos, reused when rerun (default: a temp folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="processes for game generation and envs (default 2)")
    p.add_argument("--mode", choices=("choose", "generate"), default="choose", help="decoding mode of the eval")
    for name, value in SETTINGS["full"].items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), help=f"override the setting (full: {value})")
    p.add_argument("--history-turns", type=int, default=None, help="override the prompt's history turns")
    args = p.parse_args(argv)
    for name, value in SETTINGS["quick" if args.quick else "full"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def games(work: Path, split: str, num: int, args: argparse.Namespace) -> Path:
    folder = work / f"{split}-{num}-s{args.seed}"
    if not (folder / "tasks.jsonl").exists():
        run_command("tasks", "generate", "--out", folder, "--split", split, "--num", num, "--seed", args.seed,
                    "--workers", args.workers, "--force")
    return folder


def build(args: argparse.Namespace, work: Path) -> None:
    train, held_out = games(work, "train", args.train_games, args), games(work, "eval", args.eval_games, args)
    demos = work / f"demos-{train.name}.parquet"
    if not demos.exists():
        run_command("demos", "--tasks", train, "--out", demos, "--workers", args.workers, "--seed", args.seed)
    prompt = ["--history-turns", args.history_turns] if args.history_turns is not None else []
    run_command("sft", "--demos", demos, "--out", args.out, "--model", args.model, "--epochs", args.epochs,
                "--time-budget", args.time_budget, "--seed", args.seed, "--renumber-copies", args.renumber_copies,
                "--val-frac", 0, *prompt)   # the recipe as documented: every demo game trained on
    run_command("eval", "--policy", args.out, "--tasks", held_out, "--seed", args.seed, "--mode", args.mode,
                "--workers", args.workers, "--json", args.out / "eval.json")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.work:
        build(args, args.work)
        return
    work = Path(tempfile.mkdtemp(prefix="agentprm-build-policy-"))
    try:
        build(args, work)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":  # env workers start by re-importing this file
    main()
