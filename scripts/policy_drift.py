"""How far each π_i of a run has moved from π0, on the states π0 itself visits: per evaluated iteration, the mean
KL(π_i ‖ π0) of the choose-mode distributions over the admissible commands, π_i's mean entropy, and how often π_i's
greedy command is π0's. A policy that drifts with nothing holding it near π0 shows it here before its success falls.

    python scripts/policy_drift.py --run runs/onpolicy/grpo/seed0 --every 5 --states 256 --out drift.json

The states are spread evenly over π0's greedy eval episodes (evals/pi0.parquet) — the same for every π_i; the
policies are the run's policy_0 and iter_<i>/policy folders. Writes the table as JSON (`--out`) and prints it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.io import write_json


def visited_states(episodes_path: Path, limit: int) -> list:
    """Up to `limit` states with at least two admissible commands, spread evenly over the episodes' turns."""
    states = [s for e in iter_episodes(read_trajectories(episodes_path)) for s, _ in episode_states(e)
              if len(s.admissible) >= 2]
    return [states[i * len(states) // limit] for i in range(limit)] if len(states) > limit else states


@torch.no_grad()
def command_log_probs(agent: LMAgent, states: list) -> list[torch.Tensor]:
    """Per state, log π(command | state) over its admissible commands (choose mode's distribution at T = 1)."""
    prompts = [prompt_ids(agent.tokenizer, s, agent.prompt_cfg) for s in states]
    candidates = [[reply_ids(agent.tokenizer, format_reply(c)) for c in s.admissible] for s in states]
    return [torch.log_softmax(scores.double(), -1) for scores in agent.backend.score(prompts, candidates)]


def drift(reference: list[torch.Tensor], policy: list[torch.Tensor]) -> dict:
    """Mean KL(policy ‖ reference), the policy's mean entropy, and the fraction of states whose argmax agrees."""
    kl = [float((p.exp() * (p - q)).sum()) for p, q in zip(policy, reference)]
    entropy = [float(-(p.exp() * p).sum()) for p in policy]
    agree = [int(p.argmax()) == int(q.argmax()) for p, q in zip(policy, reference)]
    n = max(1, len(kl))
    return {"kl_to_pi0": round(sum(kl) / n, 4), "entropy": round(sum(entropy) / n, 4),
            "greedy_agrees_with_pi0": round(sum(agree) / n, 4), "states": len(kl)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished or running loop folder")
    ap.add_argument("--every", type=int, default=5, help="iterations between the policies measured")
    ap.add_argument("--states", type=int, default=256)
    ap.add_argument("--out", type=Path, help="write the table here as JSON")
    args = ap.parse_args()
    states = visited_states(args.run / "evals" / "pi0.parquet", args.states)
    reference = command_log_probs(LMAgent.load(args.run / "policy_0"), states)
    iterations = sorted(int(p.parent.parent.name.removeprefix("iter_")) for p in args.run.glob("iter_*/policy/agentprm.json"))
    rows = []
    for i in [0] + [i for i in iterations if i % args.every == 0]:
        folder = args.run / "policy_0" if i == 0 else args.run / f"iter_{i}" / "policy"
        rows.append({"iteration": i, **drift(reference, command_log_probs(LMAgent.load(folder), states))})
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        write_json(args.out, {"run": str(args.run), "states": len(states), "rows": rows})


if __name__ == "__main__":
    main()
