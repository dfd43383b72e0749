"""Agents: anything that maps a batch of states to replies. The rollout engine, Best-of-N and the loop only see
this interface, so the hand-coded expert, a random baseline and LM policies are interchangeable.

`act` receives the agent's view (`AgentState`, see agent/state.py) and the env's latest `Turn` for each active
episode and returns one reply per episode (the reply may hold "REASON: … ACTION: …"; the engine parses it).
"""
from __future__ import annotations

import random
from typing import Protocol, Sequence

from agentprm.envs.base import Turn


class Agent(Protocol):
    """Replies for a batch of states. An agent that chooses among samples may also set `considered` in `act`: per
    state, (the candidates it weighed, their scores), which the rollout engine stores with each step (Best-of-N)."""
    name: str
    needs_expert: bool   # the env must compute the hand-coded expert's next action each turn

    def act(self, states: Sequence, turns: Sequence[Turn]) -> list[str]: ...


class ExpertAgent:
    """alfworld's hand-coded expert (with the pick-two fix), read from the env's `info["expert_action"]`."""

    name = "expert"
    needs_expert = True

    def act(self, states: Sequence, turns: Sequence[Turn]) -> list[str]:
        return [t.info["expert_action"] for t in turns]


class RandomAgent:
    """Uniform over the admissible commands: the floor any learned policy must beat."""

    name = "random"
    needs_expert = False

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)

    def act(self, states: Sequence, turns: Sequence[Turn]) -> list[str]:
        return [self._rng.choice(t.admissible) for t in turns]
