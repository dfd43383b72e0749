"""Teacher-forced step accuracy of a policy on expert demonstrations, per command verb.

    python scripts/step_accuracy.py --policy agentprm/assets/policy --demos held_out_demos.parquet

Every expert step is replayed into the state the agent would have seen (`replay.episode_states`); the policy
acts greedily there (its own decoding mode, default choose) and is scored against the expert's command. Shows
which decisions a policy has not learnt yet (docs/results.md: π0's "take" accuracy). Deterministic (greedy).
Make held-out demos with `agentprm demos --tasks <eval games> --out FILE --max-steps 50`.
"""
from __future__ import annotations

import argparse
from collections import Counter

from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.io import provenance, write_json

BATCH = 16


def step_accuracy(agent: LMAgent, demos: str) -> dict:
    total, hits, confusions = Counter(), Counter(), Counter()
    for episode in iter_episodes(read_trajectories(demos)):
        pairs = list(episode_states(episode))
        for lo in range(0, len(pairs), BATCH):
            chunk = pairs[lo:lo + BATCH]
            chosen = agent.act([s for s, _ in chunk], [None] * len(chunk))
            for (_, expert), mine in zip(chunk, chosen):
                verb = expert.split()[0]
                total[verb] += 1
                hits[verb] += mine == expert
                if mine != expert:
                    confusions[f"{verb} -> {mine.split()[0] if mine else '(nothing)'}"] += 1
    return {"accuracy": sum(hits.values()) / max(1, sum(total.values())), "steps": sum(total.values()),
            "by_verb": {v: {"correct": hits[v], "steps": n} for v, n in total.most_common()},
            "confusions": dict(confusions.most_common(12))}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", required=True, help="policy folder")
    p.add_argument("--demos", required=True, help="expert trajectories (.parquet file or shard folder)")
    p.add_argument("--mode", choices=("choose", "generate"), default="choose")
    p.add_argument("--json", metavar="PATH", help="also write the numbers here")
    args = p.parse_args(argv)
    result = step_accuracy(LMAgent.load(args.policy, mode=args.mode), args.demos)
    for verb, r in result["by_verb"].items():
        print(f"{verb:>8}: {r['correct']:4d}/{r['steps']:<4d} = {100 * r['correct'] / r['steps']:5.1f}%")
    print(f"     all: {100 * result['accuracy']:.1f}% of {result['steps']} steps; wrong verb or target, most common: "
          f"{result['confusions']}")
    if args.json:
        write_json(args.json, {**result, "provenance": provenance(vars(args), None)})


if __name__ == "__main__":
    main()
