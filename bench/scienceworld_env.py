"""ScienceWorld's costs through agentprm's adapter (envs/scienceworld.py): starting a Java VM, a reset, a step, and
the number of valid commands per state, playing the gold path of `--num` train tasks (round-robin over task types).

    python bench/scienceworld_env.py [--num 6] [--seed 0]

Needs `pip install 'agentprm[scienceworld]'` and Java (`make java`). Prints one line per task and the medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

from agentprm.envs import scienceworld as sw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t = time.perf_counter()
    sw._IDLE.append(sw._take_vm())          # a cold VM, kept for the envs below
    start_s = time.perf_counter() - t
    tasks = sw.scienceworld_tasks("train", args.num, seed=args.seed)
    resets, steps, valid = [], [], []
    for task in tasks:
        env = sw.ScienceWorldTextEnv(task, max_steps=200, expert=True)
        t = time.perf_counter()
        turn = env.reset()
        resets.append(time.perf_counter() - t)
        n, t = 0, time.perf_counter()
        while not turn.done and "expert_action" in turn.info:
            valid.append(len(turn.admissible))
            turn = env.step(turn.info["expert_action"])
            n += 1
        steps.append((time.perf_counter() - t) / max(n, 1))
        env.close()
        print(f"{task.task_id}: {n} gold steps, won {turn.won}, reset {resets[-1]:.2f} s, {steps[-1]:.3f} s/step")
    print(f"VM start {start_s:.2f} s; median reset {statistics.median(resets):.2f} s, step {statistics.median(steps):.3f}"
          f" s; valid commands per state median {statistics.median(valid):.0f} (min {min(valid)}, max {max(valid)})")


if __name__ == "__main__":
    main()
