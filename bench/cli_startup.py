"""Start-up of a command that needs no model: `agentprm targets mc` on a small rollouts file, as the CLI runs it now
(torch and transformers never imported) vs with the imports every command paid before, side by side in
one run, each in fresh processes.

    python bench/cli_startup.py [--repeats 5] [--before-rev 9d2d476]

Both sides run the same command end to end (parse, read the rollouts, write the targets). Side 1 is the CLI as it
was: with --before-rev, that revision's own code (checked out into a temporary git worktree); without, the current
code after importing torch and transformers first, which the CLI did at start-up for every command before the
config dataclasses moved to policy/config.py, prm/config.py and train/config.py. Prints the median wall seconds of
each side and the ratio.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys
if sys.argv[1] == "before":
    import torch, transformers  # noqa: F401  what every command imported before
elif sys.argv[1] != "now":
    sys.path.insert(0, sys.argv[1])   # an earlier revision's worktree
from agentprm.cli import main
sys.exit(main(["targets", "mc", "--rollouts", sys.argv[2], "--out", sys.argv[3]]))
"""


def rollouts(folder: Path) -> Path:
    from agentprm.data.trajectories import EpisodeRecord, StepRecord, write_episodes_file

    episodes = [EpisodeRecord(f"e{k}", f"t{k % 4}", "pick_and_place_simple", "put some apple on cabinet.", "bench", 0,
                              [StepRecord(t, f"obs {t}", (), f"go to drawer {t}", float(t == 2 and k % 2), t == 2,
                                          t == 2 and bool(k % 2)) for t in range(3)]) for k in range(64)]
    return write_episodes_file(folder / "rollouts.parquet", episodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--before-rev", help="measure this git revision's CLI as the 'before' side")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        data = rollouts(Path(tmp))
        before_side = "before"
        if args.before_rev:
            before_side = str(Path(tmp) / "before")
            subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", before_side, args.before_rev],
                           check=True, capture_output=True)
        seconds: dict[str, list[float]] = {before_side: [], "now": []}
        try:
            for _ in range(args.repeats):           # interleaved, so both sides see the same machine load
                for side in seconds:
                    start = time.perf_counter()
                    subprocess.run([sys.executable, "-c", CHILD, side, str(data), str(Path(tmp) / "q.parquet")],
                                   check=True, capture_output=True, cwd=tmp)
                    seconds[side].append(time.perf_counter() - start)
        finally:
            if args.before_rev:
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", before_side],
                               capture_output=True)
    before, now = (statistics.median(seconds[s]) for s in (before_side, "now"))
    what = f"revision {args.before_rev}" if args.before_rev else "with torch + transformers imported"
    print(f"agentprm targets mc, median of {args.repeats} fresh processes:")
    print(f"  before ({what}): {before:.2f} s")
    print(f"  now: {now:.2f} s")
    print(f"  ratio: {before / now:.1f}x faster")


if __name__ == "__main__":
    main()
