"""`agentprm eval`: success rate of a policy (or the expert / random baseline) on tasks, with a 95% CI."""
from __future__ import annotations

from agentprm.commands.common import add_common, write_summary
from agentprm.commands.rollout import add_policy_args, make_agent, play
from agentprm.errors import require


def register(sub) -> None:
    p = sub.add_parser("eval", help="success rate of a policy on tasks (Wilson 95%% CI), overall and per task type")
    add_policy_args(p, baselines=True)
    p.add_argument("--episodes-per-task", dest="per_task", type=int, default=1, metavar="K",
                   help="episodes per task (default 1)")
    add_common(p)
    p.set_defaults(func=run)


def run(args) -> int:
    require(args.per_task >= 1, f"--episodes-per-task must be at least 1 (got {args.per_task})")
    agent = make_agent(args)
    from agentprm.eval.summary import print_table

    _, summary = play(args, agent, tag="eval")
    summary["policy"] = agent.name
    print_table(summary, title=f"{agent.name} on {args.tasks}")
    write_summary(args, summary)
    return 0
