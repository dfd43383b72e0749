"""First resets of games a process has not loaded before: Fast Downward's PDDL->SAS translation computed vs read from
the disk cache (agentprm/envs/alfworld/speedups.py), side by side in one run.

    python bench/env_resets.py [--games DIR] [--num 12]

Each side runs in a fresh process (the in-memory caches start empty, as in a new env worker) that builds and resets
the same --num games once; side 1 with an empty cache folder (every translation computed, then written), side 2
with the folder side 1 filled. Prints mean seconds per reset and the ratio, and checks both sides saw the same
first observations.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys, time
from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import load_tasks
games, num = sys.argv[1], int(sys.argv[2])
AlfWorldEnv(load_tasks(games)[num].game, max_steps=5).reset()   # imports and grammar: not what is measured
seconds, first = [], []
for task in load_tasks(games)[:num]:
    start = time.perf_counter()
    first.append(AlfWorldEnv(task.game, max_steps=5).reset().observation)
    seconds.append(time.perf_counter() - start)
print(json.dumps({"seconds": seconds, "first": first}))
"""


def side(games: str, num: int, cache: Path) -> dict:
    env = {**os.environ, "AGENTPRM_SAS_CACHE": str(cache)}
    out = subprocess.run([sys.executable, "-c", CHILD, games, str(num)], env=env, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--games", metavar="DIR", help="task folder (default: generate --num + 1 eval games)")
    p.add_argument("--num", type=int, default=12, help="games reset per side (default 12)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        games = args.games
        if not games:
            from agentprm.envs.alfworld.generate import generate_tasks

            games = str(Path(scratch) / "games")
            generate_tasks(games, "eval", args.num + 1, args.seed, progress=False)
        cold = side(games, args.num, Path(scratch) / "sas")
        warm = side(games, args.num, Path(scratch) / "sas")
    mean = {name: sum(s["seconds"]) / len(s["seconds"]) for name, s in (("computed", cold), ("cached", warm))}
    same = cold["first"] == warm["first"]
    print(f"first reset of a game: {mean['computed']:.3f} s with the translation computed, {mean['cached']:.3f} s "
          f"read from the disk cache = {mean['computed'] / mean['cached']:.1f}x ({args.num} games); "
          f"same observations: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
