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


class BestOfNAgent:
    """Test-time Best-of-N (AgentPRM §3.3): sample `n` replies per state from `generator`, act with the one the
    PRM scores highest. All states' candidates are scored in one PRM call."""

    needs_expert = False

    def __init__(self, generator, prm, n: int):
        self.generator, self.prm, self.n = generator, prm, n
        self.name = f"{generator.name}+bon{n}"

    def act(self, states: Sequence, turns: Sequence[Turn]) -> list[str]:
        samples = self.generator.sample(states, turns, self.n)
        unique = [list(dict.fromkeys(replies)) for replies in samples]   # duplicates need scoring once
        # a state whose samples all agree has nothing to choose: it costs the critic nothing (an oracle critic
        # would play a whole continuation for it)
        contested = [(s, replies) for s, replies in zip(states, unique) if len(replies) > 1]
        flat = [(s, r) for s, replies in contested for r in replies]
        scores = iter(self.prm.score([s for s, _ in flat], [r for _, r in flat]).tolist() if flat else [])
        out = []
        for replies in unique:
            if len(replies) == 1:
                out.append(replies[0])
                continue
            q = [next(scores) for _ in replies]
            out.append(replies[max(range(len(replies)), key=q.__getitem__)])   # first of equals, as before
        return out
