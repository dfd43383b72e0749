"""Start-up of a command that needs no model: `agentprm targets mc` on a small rollouts file, as the CLI runs it now
(torch and transformers never imported) vs with the imports every command paid before (issue 15), side by side in
one run, each in fresh processes.

    python bench/cli_startup.py [--repeats 5]

Both sides run the same command end to end (parse, read the rollouts, write the targets); side 1 first imports
torch and transformers, which the CLI did at start-up for every command before the config dataclasses moved to
policy/config.py, prm/config.py and train/config.py. Prints the median wall seconds of each side and the ratio.
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = rollouts(Path(tmp))
        seconds: dict[str, list[float]] = {"before": [], "now": []}
        for _ in range(args.repeats):           # interleaved, so both sides see the same machine load
            for side in seconds:
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", CHILD, side, str(data), str(Path(tmp) / f"{side}.parquet")],
                               check=True, capture_output=True)
                seconds[side].append(time.perf_counter() - start)
    before, now = (statistics.median(seconds[s]) for s in ("before", "now"))
    print(f"agentprm targets mc, median of {args.repeats} fresh processes:")
    print(f"  with torch + transformers imported (before): {before:.2f} s")
    print(f"  as the CLI runs it now:                      {now:.2f} s")
    print(f"  ratio: {before / now:.1f}x faster")


if __name__ == "__main__":
    main()
