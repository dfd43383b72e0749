"""A rollout stage's rate through its run, read from its shards: rows per second for each block of shards, and
the episodes' mean length per block, side by side for several runs.

    python bench/rollout_rate.py runs/bench-iteration-12k/n12000/iter_1/rollouts \
        runs/bench-iteration-12k-threads/n12000/iter_1/rollouts [--every 15]

A rollout stage writes a shard each time `SHARD_ROWS` rows (turns) have ended episodes, so the seconds between two
shards' write times are the seconds those rows took: a rate the heartbeat lines (rollouts per minute, with episodes
of 5 to 30 turns) show only noisily. Whether a stage slows down through a long run — and whether its episodes got
longer or each turn slower — is one column each. The first shard has no start time (it counts from nothing) and is
left out. Write times are file mtimes: a copied folder loses them (the script says so when they are all equal).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pyarrow.parquet as pq

from agentprm.data.trajectories import shard_files


def blocks(folder: Path, every: int) -> list[tuple[int, int, float, float]]:
    """(first shard, last shard, rows/s, turns per episode) for each `every` consecutive shards after the first."""
    shards = [(os.stat(p).st_mtime, pq.read_table(p, columns=["episode_id"]).column(0).to_pylist())
              for p in shard_files(folder)]
    out = []
    for hi in range(every, len(shards), every):
        rows = [e for _, ids in shards[hi - every + 1:hi + 1] for e in ids]
        seconds = shards[hi][0] - shards[hi - every][0]
        if seconds <= 0:
            raise SystemExit(f"{folder}: shards {hi - every}..{hi} have the same write time (a copied folder?)")
        out.append((hi - every + 1, hi, len(rows) / seconds, len(rows) / len(set(rows))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="rollout shard folders")
    ap.add_argument("--every", type=int, default=15, help="shards per block")
    args = ap.parse_args()
    if args.every < 1:
        raise SystemExit("--every must be at least 1")
    table = [blocks(run, args.every) for run in args.runs]
    print("shards   " + "".join(f"| {str(run)[-38:]:>38} " for run in args.runs))
    print("         " + "".join(f"| {'rows/s':>10} {'turns/episode':>27} " for _ in args.runs))
    for k in range(max(len(t) for t in table)):
        first, last = next((t[k][0], t[k][1]) for t in table if k < len(t))
        cells = [f"| {t[k][2]:10.1f} {t[k][3]:27.1f} " if k < len(t) else f"| {'':38} " for t in table]
        print(f"{first:3d}-{last:3d}  " + "".join(cells))


if __name__ == "__main__":
    main()
