"""`agentprm tasks generate`: make verified ALFWorld games from the floor plans alfworld ships (or, with `--env`, the
task folder of another registered environment that has a task generator, e.g. ScienceWorld's variations).
`agentprm tasks list`: count the games of a task folder (generated, or official ALFWorld data) per type and split.
`agentprm tasks layout`: count where object types start in a folder of ALFWorld games — the layout prior a critic can
add at test time (`agentprm eval --layout`; agentprm/search/layout.py)."""
from __future__ import annotations

import argparse
import os
from collections import Counter

from agentprm.commands.common import add_common, write_summary
from agentprm.envs.alfworld.setup import TASK_TYPES
from agentprm.errors import UserError
from agentprm.outputs import declare


def register(sub) -> None:
    parser = sub.add_parser("tasks", help="generate ALFWorld games or list a task folder",
                            description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _register_generate(actions)
    _register_list(actions)
    _register_layout(actions)


def _register_generate(actions) -> None:
    p = actions.add_parser("generate", help="generate verified ALFWorld games into a folder with tasks.jsonl")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (games + tasks.jsonl)")
    p.add_argument("--split", required=True, metavar="train|eval",
                   help="train or eval; the two use disjoint floor plans (ScienceWorld: train, dev, test; eval = test)")
    p.add_argument("--env", default="alfworld", metavar="NAME",
                   help="the registered environment whose tasks to make (default alfworld; scienceworld)")
    p.add_argument("--num", type=int, required=True, metavar="N", help="number of games (round robin over types)")
    p.add_argument("--types", nargs="+", metavar="TYPE", help=f"task types (default all: {', '.join(TASK_TYPES)})")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="K",
                   help="worker processes (default: the CPU count; the games are the same for any K)")
    p.add_argument("--force", action="store_true", help="replace the task folder agentprm generated in --out")
    add_common(p)
    declare(p, {"out": "tasks"})
    p.set_defaults(func=run_generate)


def _register_list(actions) -> None:
    p = actions.add_parser("list", help="count games per task type and split")
    p.add_argument("--tasks", "--alfworld-data", dest="tasks", required=True, metavar="DIR",
                   help="a generated folder (tasks.jsonl) or official ALFWorld data, e.g. $ALFWORLD_DATA/json_2.1.1")
    p.add_argument("--types", nargs="+", metavar="TYPE", help="only these task types")
    p.set_defaults(func=run_list)


def _register_layout(actions) -> None:
    p = actions.add_parser("layout", help="count where object types start in ALFWorld games (the layout prior)")
    p.add_argument("--tasks", required=True, metavar="DIR",
                   help="ALFWorld games to count: the train split's (never the games you evaluate on)")
    p.add_argument("--out", required=True, metavar="FILE", help="the layout prior (JSON) for `eval --layout`")
    add_common(p)
    declare(p, {"out": "file:layout"}, inputs=("tasks",))
    p.set_defaults(func=run_layout)


def check_flags(args: argparse.Namespace) -> None:
    """One-line errors naming the flag, before any work starts."""
    if args.env != "alfworld":   # that env's generator checks its own split and types
        from agentprm.envs.registry import ENVS, get_env

        try:
            get_env(args.env)
        except UserError:
            raise UserError(f"--env {args.env!r}: not a registered environment ({', '.join(ENVS)})") from None
        return
    if args.split not in ("train", "eval"):
        raise UserError(f"--split must be train or eval, not {args.split!r}")
    unknown = [t for t in args.types or () if t not in TASK_TYPES]
    if unknown:
        raise UserError(f"--types: unknown task type {unknown[0]!r}; known: {', '.join(TASK_TYPES)}")


def run_generate(args: argparse.Namespace) -> int:
    check_flags(args)
    if args.env != "alfworld":
        import time

        from agentprm.envs.registry import task_generator

        generator, start = task_generator(args.env), time.monotonic()
        tasks = generator(args.out, args.split, args.num, args.seed, args.types, workers=args.workers,
                          force=args.force)
        write_summary(args, {"games": len(tasks), "env": args.env, "split": args.split, "out": args.out,
                             "by_type": dict(Counter(t.task_type for t in tasks)),
                             "seconds": round(time.monotonic() - start, 2)})
        print(f"{len(tasks)} {args.env} {args.split} tasks of {len({t.task_type for t in tasks})} types -> {args.out}")
        return 0
    from agentprm.envs.alfworld.generate import generate  # imports the engine: keep `--help` fast

    result = generate(args.out, args.split, args.num, args.seed, args.types, workers=args.workers,
                      force=args.force)
    n = len(result.tasks)
    summary = {"games": n, "split": args.split, "out": args.out,
               "by_type": dict(Counter(t.task_type for t in result.tasks)),
               "floorplans": sorted({t.floorplan for t in result.tasks}),
               "failures": len(result.failures), "failure_reasons": result.failures,
               "seconds": round(result.seconds, 2), "seconds_per_game": round(result.seconds / n, 3)}
    write_summary(args, summary)
    print(f"{n} {args.split} games verified in {result.seconds:.1f}s ({len(result.failures)} regenerated) "
          f"-> {args.out}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from agentprm.envs.alfworld.tasks import load_tasks

    tasks = load_tasks(args.tasks, args.types)
    counts = Counter((t.task_type, t.split or "-") for t in tasks)
    splits = sorted({split for _, split in counts})
    table = Table(title=escape(f"{args.tasks}: {len(tasks)} games"))
    for column in ("task type", *splits, "total"):
        table.add_column(column, justify="left" if column == "task type" else "right")
    for task_type in TASK_TYPES:
        row = [counts[task_type, split] for split in splits]
        if sum(row):
            table.add_row(task_type, *map(str, row), str(sum(row)))
    Console().print(table)
    return 0


def run_layout(args: argparse.Namespace) -> int:
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.search.layout import LayoutPrior

    tasks = load_tasks(args.tasks)
    if any(t.env != "alfworld" for t in tasks):
        raise UserError(f"{args.tasks}: the layout prior counts ALFWorld games; this folder holds "
                        f"{sorted({t.env for t in tasks} - {'alfworld'})[0]} tasks")
    prior = LayoutPrior.from_tasks(tasks)
    prior.save(args.out)
    write_summary(args, {"games": prior.games, "pairs": len(prior.both), "out": args.out})
    print(f"layout prior of {prior.games} games ({len(prior.both)} object/receptacle type pairs) -> {args.out}")
    return 0
