"""`agentprm rollout`: play a policy on tasks and write the trajectories as Parquet shards — stage 1 of the loop, with
the loop's `rollout` section as flags and defaults (loop/config.py `RolloutConfig`). Shards are written every
SHARD_ROWS rows, so a killed run loses at most the episodes not yet flushed, and `--resume` plays only the episodes
the folder lacks (episode ids are fixed by tasks, --per-task and --seed; the resumed ones are fresh draws), so
a larger --per-task with --resume adds samples per task to a finished rollout."""
from __future__ import annotations

import argparse

from agentprm.agent.decoding import Decoding
from agentprm.agent.remote import BACKENDS, BackendConfig
from agentprm.commands.common import (add_common, add_config_flags, add_device_flags, add_max_errors, config_from_args,
                                      write_summary)
from agentprm.envs.pool import POOLS, configure_pool
from agentprm.errors import UserError, require
from agentprm.loop.config import RolloutConfig
from agentprm.outputs import claim_folder, declare

SHARD_ROWS = 2_000   # rows buffered before a shard is written: what a kill can cost (~100 episodes)

def add_policy_args(p: argparse.ArgumentParser, baselines: bool = False) -> None:
    """Flags that pick and decode a policy (shared by `rollout` and `eval`)."""
    what = "a policy folder, or expert|random" if baselines else "a policy folder (from `agentprm sft`)"
    p.add_argument("--policy", required=True, metavar="DIR", help=what)
    p.add_argument("--tasks", required=True, metavar="DIR", help="task folder (generated tasks.jsonl or official)")
    add_config_flags(p, RolloutConfig, only=("mode", "num_envs", "workers", "pool", "ray_address"),
                     choices={"mode": ("choose", "generate"), "pool": POOLS})
    add_config_flags(p, BackendConfig, choices={"backend": BACKENDS})
    add_config_flags(p, Decoding)


def make_agent(args: argparse.Namespace):
    """The agent `--policy` names; also where this command's env workers will run (--pool), before any is started."""
    configure_pool(args.pool, args.ray_address)
    from agentprm.agent.policies import ExpertAgent, RandomAgent

    backend = config_from_args(BackendConfig, args)
    require(backend.backend == "hf" or args.policy not in ("expert", "random"),
            f"--backend {backend.backend} serves a policy folder, not the {args.policy} baseline")
    if args.policy == "expert":
        return ExpertAgent()
    if args.policy == "random":
        return RandomAgent(args.seed)
    from agentprm.agent.lm import LMAgent

    return LMAgent.load(args.policy, backend=backend, mode=args.mode, temperature=args.temperature, seed=args.seed,
                        decoding=config_from_args(Decoding, args))


def register(sub) -> None:
    p = sub.add_parser("rollout", help="play a policy on tasks; write trajectories (Parquet shards)")
    add_policy_args(p)
    add_config_flags(p, RolloutConfig, only=("per_task", "temperature", "max_steps"))
    p.add_argument("--out", required=True, metavar="DIR", help="output folder for the shards")
    p.add_argument("--resume", action="store_true",
                   help="--out holds an interrupted rollout of the same tasks, --per-task and --seed: keep its "
                        "episodes, play the missing ones (a larger --per-task than before adds samples to every task)")
    add_max_errors(p)
    add_device_flags(p)
    add_common(p)
    declare(p, {"out": "shards"}, inputs=("policy", "tasks"))
    p.set_defaults(func=run)


def run(args) -> int:
    import time
    from pathlib import Path

    from agentprm.data.summary import check_env_errors, print_table, summarize
    from agentprm.data.trajectories import ShardWriter, iter_episodes, read_trajectories, shard_files
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.rollout.engine import episode_jobs, run_episodes

    start, out = time.monotonic(), Path(args.out)
    jobs = episode_jobs(load_tasks(args.tasks), args.per_task, args.seed, args.max_steps, tag="rollout")
    kept = list(iter_episodes(read_trajectories(out))) if out.is_dir() and any(out.glob("*.parquet")) else []
    if kept and not args.resume:
        raise UserError(f"{out}: holds {len(kept)} episodes already; pass --resume to play only the missing ones "
                        "(nothing is deleted), or choose another --out")
    planned = {j.episode_id for j in jobs}
    stranger = next((e.episode_id for e in kept if e.episode_id not in planned), None)
    if stranger:
        raise UserError(f"{out}: holds episode {stranger!r}, which this rollout would not play: resume with the same "
                        "--tasks, --per-task and --seed")
    agent = make_agent(args)
    done = {e.episode_id for e in kept}
    claim_folder(out, "shards", "--out ")   # absent or empty: made agentprm's; else it is one (outputs.prepared)
    with ShardWriter(out, rows_per_shard=SHARD_ROWS) as writer:
        new = run_episodes([j for j in jobs if j.episode_id not in done], agent, num_envs=args.num_envs,
                           num_workers=args.workers, writer=writer, description="rollout")
    summary = summarize(kept + new)
    summary.update(seconds=round(time.monotonic() - start, 1), resumed=len(kept),
                   shards=[str(p) for p in shard_files(out)])
    print_table(summary, title=f"{agent.name} on {args.tasks}")
    print(f"wrote {len(writer.paths)} shard(s) to {out}" + (f" (kept {len(kept)} episodes)" if kept else ""))
    write_summary(args, summary)
    check_env_errors(kept + new, args.max_errors, "", "pass --max-errors {n}")   # after the shards and the JSON
    return 0
