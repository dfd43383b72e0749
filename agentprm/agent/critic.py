"""The Critic protocol: what test-time search (Best-of-N, beam), the policy updates and the oracle bounds ask of
anything that scores actions. Implemented by the learned PRM (`prm/model.py` ProcessRewardModel), PRIME's implicit
PRM (`prm/prime.py`), the Monte-Carlo oracle (`rollout/oracle.py`), the uniform control (`search/uniform.py`), the
policy's own log π (`search/policy.py`, the critic-free control), the lookup table of `scripts/update_ceiling.py`, and
ALFWorld's layout prior added to any of them (`search/layout.py` LayoutCritic); a new critic is one class with this
method.

`score(states, replies)[k]` is Q(s_k, a_k), higher is better, as a 1-D float tensor of len(replies). Best-of-N and
the updates compare scores of one state's replies only; beam search also compares scores across states (its
branches), so a critic used there should put every state on one scale (the PRMs here: a probability of success).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:   # torch stays a lazy import for the modules that only name the protocol
    import torch

    from agentprm.agent.state import AgentState


@runtime_checkable
class Critic(Protocol):
    def score(self, states: Sequence[AgentState], replies: Sequence[str]) -> torch.Tensor: ...
