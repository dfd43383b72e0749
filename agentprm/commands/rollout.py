"""`agentprm rollout`: play a policy on tasks and write the trajectories as Parquet shards — stage 1 of the loop, with
the loop's `rollout` section as flags and defaults (loop/config.py `RolloutConfig`)."""
from __future__ import annotations

import argparse

from agentprm.commands.common import add_common, add_device_flags, add_config_flags, write_summary
from agentprm.errors import require
from agentprm.loop.config import RolloutConfig

def add_policy_args(p: argparse.ArgumentParser, baselines: bool = False) -> None:
    """Flags that pick and decode a policy (shared by `rollout` and `eval`)."""
    what = "a policy folder, or expert|random" if baselines else "a policy folder (from `agentprm sft`)"
    p.add_argument("--policy", required=True, metavar="DIR", help=what)
    p.add_argument("--tasks", required=True, metavar="DIR", help="task folder (generated tasks.jsonl or official)")
    add_config_flags(p, RolloutConfig, only=("mode", "num_envs", "workers"), choices={"mode": ("choose", "generate")})


def make_agent(args: argparse.Namespace):
    require(args.temperature >= 0, f"--temperature must be >= 0 (got {args.temperature})")
    require(args.max_steps >= 1, f"--max-steps must be at least 1 (got {args.max_steps})")
    require(args.num_envs >= 1, f"--num-envs must be at least 1 (got {args.num_envs})")
    from agentprm.agent.policies import ExpertAgent, RandomAgent

    if args.policy == "expert":
        return ExpertAgent()
    if args.policy == "random":
        return RandomAgent(args.seed)
    import torch

    from agentprm.agent.lm import LMAgent

    if not args.threads:   # env workers share the cores; more torch threads make every step slower
        torch.set_num_threads(1)
    return LMAgent.load(args.policy, mode=args.mode, temperature=args.temperature, seed=args.seed)


def play(args: argparse.Namespace, agent, tag: str, per_task: int, writer=None) -> tuple[list, dict]:
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.rollout.play import play_tasks

    return play_tasks(agent, load_tasks(args.tasks), per_task=per_task, seed=args.seed,
                      max_steps=args.max_steps, tag=tag, num_envs=args.num_envs, workers=args.workers,
                      writer=writer)


def register(sub) -> None:
    p = sub.add_parser("rollout", help="play a policy on tasks; write trajectories (Parquet shards)")
    add_policy_args(p)
    add_config_flags(p, RolloutConfig, only=("per_task", "temperature", "max_steps"))
    p.add_argument("--out", required=True, metavar="DIR", help="output folder for the shards")
    add_device_flags(p)
    add_common(p)
    p.set_defaults(func=run)


def run(args) -> int:
    require(args.per_task >= 1, f"--per-task must be at least 1 (got {args.per_task})")
    agent = make_agent(args)
    from agentprm.data.summary import print_table
    from agentprm.data.trajectories import ShardWriter

    with ShardWriter(args.out) as writer:
        _, summary = play(args, agent, tag="rollout", per_task=args.per_task, writer=writer)
    summary["shards"] = [str(p) for p in writer.paths]
    print_table(summary, title=f"{agent.name} on {args.tasks}")
    print(f"wrote {len(writer.paths)} shard(s) to {args.out}")
    write_summary(args, summary)
    return 0
