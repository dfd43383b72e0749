"""`agentprm demos`: the hand-coded expert on every task, written as trajectories (SFT data, InversePRM positives)."""
from __future__ import annotations

import time
from pathlib import Path

from agentprm.agent.policies import ExpertAgent
from agentprm.commands.common import add_common, add_max_errors, write_summary
from agentprm.data.summary import check_env_errors, print_table, summarize
from agentprm.data.trajectories import write_episodes_file
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.errors import UserError
from agentprm.outputs import declare
from agentprm.rollout.engine import episode_jobs, run_episodes


def register(sub) -> None:
    p = sub.add_parser("demos", help="run the hand-coded expert on every task; write trajectories (Parquet)")
    p.add_argument("--tasks", required=True, help="task folder (generated tasks.jsonl or official layout)")
    p.add_argument("--out", required=True, help="output .parquet file")
    p.add_argument("--types", nargs="+", help="only these task types")
    p.add_argument("--per-task", type=int, default=1, help="episodes per task (default 1)")
    p.add_argument("--max-steps", type=int, default=200, help="step budget per episode (ALFWorld expert: 200)")
    p.add_argument("--workers", type=int, default=None, help="env worker processes (default: CPU count)")
    add_max_errors(p)
    add_common(p)
    declare(p, {"out": "file:trajectories"}, inputs=("tasks",))
    p.set_defaults(func=run)


def run(args) -> int:
    out = Path(args.out)
    if out.suffix != ".parquet":
        raise UserError(f"--out {out}: expected a .parquet file name")
    tasks = load_tasks(args.tasks, args.types)
    start = time.monotonic()
    jobs = episode_jobs(tasks, args.per_task, args.seed, args.max_steps, tag="expert")
    episodes = run_episodes(jobs, ExpertAgent(), num_envs=2 * (args.workers or 2), num_workers=args.workers,
                            description="expert demos")
    write_episodes_file(out, episodes)
    summary = summarize(episodes)
    summary["seconds"] = round(time.monotonic() - start, 1)
    print_table(summary, title=f"expert on {args.tasks}")
    print(f"wrote {sum(len(e.steps) for e in episodes)} steps of {len(episodes)} episodes to {out}")
    write_summary(args, summary)
    check_env_errors(episodes, args.max_errors, "", "pass --max-errors {n}")   # after the file and the JSON
    return 0
