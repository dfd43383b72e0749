"""The policy's own log π(a | s) as a critic: Best-of-N then acts with the sample π itself finds likeliest.

Why. A learned critic is worth its training only where it ranks π's alternatives better than π already does; this
is that reference, at no training cost (`agentprm eval --best-of N --prm policy`), and with `--layout` the same
prior added to it — the critic-free row a learned critic plus the prior must beat (docs/results.md, "The statistic
handed to the critic"). Its logits are log π at temperature 1 (choose mode's packed scoring of each reply), whatever
temperature the samples were drawn at.

In beam search (`--beam-width K --prm policy`) it ranks branches by how sure π is of each one's next command — a
probability, so on one scale across states: the critic-free control for what a learned Q adds in ranking *states*,
beside the uniform critic's control for what more samples add.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.lm import LMAgent

if TYPE_CHECKING:
    from agentprm.agent.state import AgentState


def log_probs(agent: LMAgent, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor:
    """log π(reply | state) of each (state, reply) pair under `agent`'s model and prompt format."""
    if len(states) != len(replies):
        raise ValueError(f"{len(states)} states but {len(replies)} replies")
    prompts = [prompt_ids(agent.tokenizer, s, agent.prompt_cfg) for s in states]
    scores = agent.backend.score(prompts, [[reply_ids(agent.tokenizer, r)] for r in replies])
    return torch.tensor([float(x[0]) for x in scores], dtype=torch.float64)   # each float32 score, exactly


class PolicyCritic:
    """Scores a reply by the policy's log π (its `logits`; `score` squashes them, the order unchanged). Given the
    agent that samples, it scores with that agent's own model (one copy in memory; log π does not depend on the
    agent's mode or temperature); given a folder, it loads the policy."""

    def __init__(self, policy: LMAgent | str | Path):
        self.agent = policy if isinstance(policy, LMAgent) else LMAgent.load(policy, mode="choose")
        self.name = f"logpi({self.agent.name})"

    def logits(self, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor:
        return log_probs(self.agent, states, replies)

    def score(self, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor:
        return self.logits(states, replies).sigmoid()
