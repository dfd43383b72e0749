"""Beam search with one episode at a time vs several at once (`play_beam`'s `workers`: a thread and an env process
per episode in flight), side by side in one run on the same games, policy and PRM.

    python bench/beam_workers.py --run runs/quickstart-seeds/seed0 [--games 216] [--workers 1 2]

`--run` is a finished loop run (its iter_1/policy, iter_1/prm and tasks/eval; `agentprm quickstart` makes one). Each
side plays beam 2x2 at the eval temperature and seed the loop uses, in this process, one after the other. Prints
seconds, success and env steps per side and the speed-up over the first; the episodes must be identical (each
samples from its own seeded stream), which the script checks.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--games", type=int, default=216)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    from agentprm.agent.lm import LMAgent
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.loop.config import load_config
    from agentprm.prm.loading import load_prm
    from agentprm.search import play_beam

    cfg = load_config(args.run / "config.yaml")
    tasks = load_tasks(args.run / "tasks" / "eval")[:args.games]
    policy = LMAgent.load(args.run / "iter_1" / "policy", mode=cfg.rollout.mode, temperature=cfg.eval.bon_temperature,
                          seed=cfg.seed)
    prm = load_prm(args.run / "iter_1" / "prm")
    first = None
    print(f"beam {cfg.eval.beam_width}x{cfg.eval.beam_expand} with Q1 on {len(tasks)} games of {args.run}")
    for workers in args.workers:
        start = time.perf_counter()
        episodes, summary = play_beam(tasks, policy, prm, width=cfg.eval.beam_width, expand=cfg.eval.beam_expand,
                                      max_steps=cfg.eval.max_steps, seed=cfg.seed + 1000, workers=workers)
        seconds = time.perf_counter() - start
        actions = [[s.action for s in e.steps] for e in episodes]
        first = first or (seconds, actions)
        assert actions == first[1], "the episodes differ between worker counts"
        print(f"workers {workers}: {seconds:6.1f} s  success {100 * summary['success_rate']:.1f}%  "
              f"env steps {summary['env_steps']}  speed-up {first[0] / seconds:.2f}x", flush=True)


if __name__ == "__main__":
    main()
