"""`agentprm eval`: success rate of a policy (or the expert / random baseline) on tasks, with a 95% CI; with
`--prm`, test-time search guided by the PRM: Best-of-N (sample N replies per turn, act with the best-scored) or
beam search (keep the `--beam-width` best partial episodes by Q every turn). Episodes are played as the loop's evals
play them (the `eval` section's step budget, the `rollout` section's envs)."""
from __future__ import annotations

from agentprm.commands.common import add_common, add_config_flags, add_device_flags, add_max_errors, write_summary
from agentprm.commands.rollout import add_policy_args, make_agent
from agentprm.errors import require
from agentprm.loop.config import EvalConfig
from agentprm.outputs import declare


def register(sub) -> None:
    p = sub.add_parser("eval", help="success rate of a policy on tasks (Wilson 95%% CI), overall and per task type",
                       description=__doc__)
    add_policy_args(p, baselines=True)
    add_config_flags(p, EvalConfig, only=("episodes_per_task", "max_steps"))
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy, as the loop evaluates (default 0)")
    p.add_argument("--prm", metavar="DIR", help="a PRM folder (train-prm) to guide test-time search; "
                                                "'uniform': seeded random scores, the control that says how much "
                                                "of a search's gain is the PRM's; 'policy' (or 'logpi'): the "
                                                "--policy model's own log π, the critic-free reference (Best-of-N "
                                                "acts with its likeliest sample; beam keeps the branches whose next "
                                                "command π is surest of); or the name of a critic you registered "
                                                "(agentprm/search/critics.py)")
    p.add_argument("--layout", metavar="FILE", help="add ALFWorld's layout prior (`agentprm tasks layout` of the train "
                                                    "games) to the critic: logit Q + W·f, f a searching command's "
                                                    "advantage of where the wanted object tends to be")
    p.add_argument("--layout-weight", type=float, default=None, metavar="W",
                   help="W of --layout (required with it; scripts/informed_critic.py chooses it on held-out states)")
    p.add_argument("--best-of", type=int, default=1, metavar="N", help="Best-of-N with --prm (default 1: off)")
    p.add_argument("--beam-width", type=int, default=0, metavar="K", help="beam search with --prm (default 0: off)")
    p.add_argument("--beam-expand", type=int, default=4, metavar="M", help="samples per beam branch (default 4)")
    p.add_argument("--episodes", metavar="FILE", help="also write every episode played, turn by turn (Parquet, the "
                                                      "trajectory schema of docs/data.md)")
    add_max_errors(p)
    add_device_flags(p)
    add_common(p)
    declare(p, {"episodes": "file:trajectories"}, inputs=("policy", "prm", "tasks", "layout"))
    p.set_defaults(func=run)


def run(args) -> int:
    searching = args.best_of > 1 or args.beam_width > 0
    require(not searching or args.prm, "--best-of/--beam-width need --prm DIR")
    require(not (args.best_of > 1 and args.beam_width > 0), "choose one of --best-of and --beam-width")
    require(not searching or args.temperature > 0, "--best-of/--beam-width sample replies: pass --temperature > 0")
    require((args.layout is None) == (args.layout_weight is None), "--layout and --layout-weight go together")
    require(not args.layout or args.best_of > 1, "--layout ranks one state's replies: it needs --best-of N (beam "
                                                 "search compares different states' scores)")
    require(args.prm not in ("policy", "logpi") or args.policy not in ("expert", "random"),
            f"--prm policy scores replies by the --policy model's log π; {args.policy!r} has none")
    own = make_agent(args) if args.prm in ("policy", "logpi") else None   # the critic is its own log π: one model in memory
    critic = _critic(args, own) if searching else None   # a bad PRM folder or layout file: refused before any play
    agent = own if own is not None else make_agent(args)
    from agentprm.data.summary import check_env_errors, print_table
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.eval.play import EvalPlay, play_eval
    from agentprm.search import BestOfNAgent

    how = EvalPlay(args.episodes_per_task, args.max_steps, args.seed, args.num_envs, args.workers)
    beam = (args.beam_width, args.beam_expand) if args.beam_width else None
    episodes, summary = play_eval(agent, load_tasks(args.tasks), how, critic=critic,
                                  best_of=args.best_of, beam=beam)
    if beam:
        summary["search"] = f"{agent.name}+beam{args.beam_width}x{args.beam_expand}"
    summary["policy"] = BestOfNAgent.label(agent.name, args.best_of) if args.best_of > 1 else agent.name
    print_table(summary, title=f"{summary.get('search', agent.name)} on {args.tasks}")
    if args.episodes:
        from agentprm.data.trajectories import write_episodes_file

        write_episodes_file(args.episodes, episodes)
    write_summary(args, summary)
    check_env_errors(episodes, args.max_errors, "", "pass --max-errors {n}")   # after the table and the JSON
    return 0


def _critic(args, policy=None):
    """`--prm`: a registered critic's name (search/critics.py: uniform, policy = logpi, layout, …, or one of yours
    from an `agentprm.critics` entry point), else a PRM folder."""
    from agentprm.search.critics import CRITICS, CriticContext, make_critic

    name = "logpi" if args.prm == "policy" else args.prm
    if name in ("prm", "oracle") or not CRITICS.knows(name):   # a folder (even one called like a critic)
        critic = make_critic("prm", CriticContext(args.seed, prm=args.prm))
    else:
        critic = make_critic(name, CriticContext(args.seed, policy=policy))
    if args.layout:
        from agentprm.search.layout import LayoutCritic, LayoutPrior

        critic = LayoutCritic(critic, LayoutPrior.load(args.layout), args.layout_weight)
    return critic
