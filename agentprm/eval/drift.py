"""How far a policy has moved from π0, on the states π0 itself visits: the mean KL(π ‖ π0) of the choose-mode
distributions over the admissible commands, π's mean entropy, and how often π's greedy command is π0's. A policy that
drifts with nothing holding it near π0 shows it here before its success falls (docs/onpolicy.md). The loop measures it
at every evaluated iteration (`evals/drift_pi<i>.json`, the learning curve's `kl_to_pi0`);
scripts/policy_drift.py measures a finished run."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.data.trajectories import iter_episodes, read_trajectories

DRIFT_STATES = 256   # states of π0's greedy eval episodes every π_i is compared on


def visited_states(episodes_path: Path, limit: int = DRIFT_STATES) -> list:
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


@dataclass
class DriftReference:
    """π0's choose-mode distributions on the states of its greedy eval episodes: computed once, then every π_i is
    measured against them (`measure`)."""
    states: list
    log_probs: list[torch.Tensor]

    @classmethod
    def of(cls, pi0: Path, episodes: Path, limit: int = DRIFT_STATES) -> DriftReference:
        states = visited_states(episodes, limit)
        return cls(states, command_log_probs(LMAgent.load(pi0), states))

    def measure(self, policy: Path) -> dict:
        """`drift` of the policy folder `policy` from π0 on these states."""
        return drift(self.log_probs, command_log_probs(LMAgent.load(policy), self.states))
