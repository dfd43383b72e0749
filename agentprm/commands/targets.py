"""`agentprm targets mc`: Monte-Carlo Q-targets Q̂(s, a) from rollouts (AgentPRM stage 1).
`agentprm targets pairs`: pairs of actions at the same state whose Q̂ differ by more than δ (relative PRM losses)."""
from __future__ import annotations

import time

from agentprm.commands.common import add_common, add_config_flags, write_summary
from agentprm.data.tables import read_targets, write_with_info
from agentprm.errors import require
from agentprm.outputs import declare
from agentprm.targets.mc import TargetsConfig, targets_from_rollouts
from agentprm.targets.pairs import make_pairs, pairs_counts, pairs_info


def register(sub) -> None:
    parser = sub.add_parser("targets", help="Q-targets from rollouts, or preference pairs from Q-targets",
                            description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("mc", help="Monte-Carlo Q-targets: mean discounted return-to-go per (state, action)")
    p.add_argument("--rollouts", required=True, metavar="PATH", help="trajectory .parquet file or folder of shards")
    add_config_flags(p, TargetsConfig, only=("gamma",))
    p.add_argument("--out", required=True, metavar="FILE", help="output targets .parquet file")
    add_common(p)
    declare(p, {"out": "file:targets"}, inputs=("rollouts",))
    p.set_defaults(func=run_mc)

    p = actions.add_parser("pairs", help="pairs (chosen, rejected) at one state with Q̂ gap > delta")
    p.add_argument("--targets", required=True, metavar="FILE", help="targets .parquet from `targets mc`")
    p.add_argument("--delta", type=float, default=0.0, metavar="D", help="minimum Q̂ gap, exclusive (default 0)")
    p.add_argument("--out", required=True, metavar="FILE", help="output pairs .parquet file")
    add_common(p)
    declare(p, {"out": "file:pairs"}, inputs=("targets",))
    p.set_defaults(func=run_pairs)


def run_mc(args) -> int:
    start = time.monotonic()
    targets = targets_from_rollouts(args.rollouts, args.gamma)
    require(targets.table.num_rows > 0, f"{args.rollouts}: no targets to write — {targets.info['episodes']} episodes "
            f"({targets.info['failed_episodes_dropped']} failed ones dropped); roll out first")
    write_with_info(args.out, targets.table, targets.info)
    q = targets.table["q"].to_numpy()
    summary = {**targets.info, "targets": targets.table.num_rows, "mean_q": float(q.mean()) if len(q) else None,
               "seconds": round(time.monotonic() - start, 2)}
    print(f"{summary['steps']} steps of {summary['episodes']} episodes -> {summary['targets']} (state, action) "
          f"targets in {args.out} (failed episodes dropped: {summary['failed_episodes_dropped']})")
    write_summary(args, summary)
    return 0


def run_pairs(args) -> int:
    targets = read_targets(args.targets)
    pairs = make_pairs(targets.table, args.delta)
    write_with_info(args.out, pairs, pairs_info(targets, args.delta))
    counts = pairs_counts(pairs, targets.table)
    print(f"{counts['pairs']} pairs at {counts['states']} states of {counts['games']} games, "
          f"{counts['averaged_pairs']} of them with both Q̂ averaged over >= 2 rollouts (delta {args.delta}) -> "
          f"{args.out}")
    write_summary(args, {**counts, "delta": args.delta, "targets": args.targets})
    return 0
