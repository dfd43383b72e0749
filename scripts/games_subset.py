"""Monte-Carlo targets of the first N games of a targets file: whole games only (rollouts per game at an
equal rollout budget).

    python scripts/games_subset.py --targets runs/prm-30k/targets-30k.parquet --games 1200 \
        --out runs/prm-30k/targets-1200x10.parquet

A game's MC targets depend only on its own episodes (targets/mc.py averages returns per state, and a state belongs
to one game), so keeping every row of the first N games (task ids in sorted order, the order the train split was
generated in: the six task types take turns) gives exactly the targets of a rollout of those N games alone. With
30,000 rollouts at 10 a game on 3,000 games, 1,200 games keep 12,000 of them at 10 a game — the same budget as
4 a game on all 3,000, spent on fewer games with better-averaged labels.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from agentprm.data.tables import read_targets, write_with_info
from agentprm.errors import UserError


def first_games(table: pa.Table, games: int) -> pa.Table:
    """The rows of the first `games` task ids in sorted order; refuses a file with fewer games."""
    ids = sorted(pc.unique(table["task_id"]).to_pylist())
    if games > len(ids):
        raise SystemExit(f"--games {games}: the targets hold {len(ids)} games")
    return table.filter(pc.is_in(table["task_id"], value_set=pa.array(ids[:games])))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", type=Path, required=True, help="targets .parquet of `agentprm targets mc`")
    ap.add_argument("--games", type=int, required=True, help="keep the first N games, whole")
    ap.add_argument("--out", type=Path, required=True, help="output targets .parquet (not an existing file)")
    args = ap.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"--out {args.out}: exists; choose a new name")
    try:
        source = read_targets(args.targets)
    except UserError as e:   # a missing or malformed file: its one line, not a traceback
        raise SystemExit(str(e))
    kept = first_games(source.table, args.games)
    info = {**source.info, "subset_of": str(args.targets.resolve()), "games": args.games}
    write_with_info(args.out, kept, info)
    print(f"{args.out}: {kept.num_rows:,} targets of {args.games:,} games (of {source.table.num_rows:,})")


if __name__ == "__main__":
    main()
