"""Beam search with one episode at a time vs several at once (`play_beam`'s `workers`: a thread and an env process
per episode in flight), side by side in one run on the same games, policy and PRM.

    python bench/beam_workers.py --run runs/quickstart-seeds/seed0 [--games 216] [--workers 1 2] [--threads 0 1]

`--run` is a finished loop run (its iter_1/policy, iter_1/prm and tasks/eval; `agentprm quickstart` makes one). Each
side plays beam 2x2 at the eval temperature and seed the loop uses, in this process, one after the other. Prints
seconds, success and env steps per side and the speed-up over the first; at one thread count the episodes must be
identical (each samples from its own seeded stream), which the script checks. `--threads` plays each worker count
at each torch thread count (0: the placement's, torch's default; others set for the play, like `--threads` of a
command): another count may change a score's last bits, so across counts the script reports whether the episodes
agree instead of requiring it.
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
    ap.add_argument("--threads", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    import torch

    from agentprm.agent.lm import LMAgent
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.loop.config import load_config
    from agentprm.models import DeviceConfig, use_device
    from agentprm.prm.loading import load_prm
    from agentprm.search import play_beam

    cfg = load_config(args.run / "config.yaml")
    tasks = load_tasks(args.run / "tasks" / "eval")[:args.games]
    policy = LMAgent.load(args.run / "iter_1" / "policy", mode=cfg.rollout.mode, temperature=cfg.eval.bon_temperature,
                          seed=cfg.seed)
    prm = load_prm(args.run / "iter_1" / "prm")
    default = torch.get_num_threads()
    first = None
    print(f"beam {cfg.eval.beam_width}x{cfg.eval.beam_expand} with Q1 on {len(tasks)} games of {args.run}")
    for threads in args.threads:
        torch.set_num_threads(default)
        use_device(DeviceConfig(device="cpu", threads=threads))   # as `--threads N` would; 0: the default, shared
        baseline = None
        for workers in args.workers:
            start = time.perf_counter()
            episodes, summary = play_beam(tasks, policy, prm, width=cfg.eval.beam_width, expand=cfg.eval.beam_expand,
                                          max_steps=cfg.eval.max_steps, seed=cfg.seed + 1000, workers=workers)
            seconds = time.perf_counter() - start
            actions = [[s.action for s in e.steps] for e in episodes]
            first = first or (seconds, actions)
            baseline = baseline or actions
            assert actions == baseline, "the episodes differ between worker counts"
            print(f"threads {threads or f'default ({default})'} workers {workers}: {seconds:6.1f} s  success "
                  f"{100 * summary['success_rate']:.1f}%  env steps {summary['env_steps']}  speed-up "
                  f"{first[0] / seconds:.2f}x  episodes as the first side's: {actions == first[1]}", flush=True)


if __name__ == "__main__":
    main()
