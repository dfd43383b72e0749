"""Test-time Best-of-N with a critic (docs/algorithms.md §1): the agent the loop's `pi<i>_bon<N>` rows, `agentprm eval
--best-of N` and the study scripts play."""
from __future__ import annotations

from typing import Sequence

from agentprm.agent.critic import Critic
from agentprm.envs.base import Turn


class BestOfNAgent:
    """Test-time Best-of-N (AgentPRM §3.3): sample `n` replies per state from `generator`, act with the one the
    PRM scores highest. All states' candidates are scored in one PRM call. After `act`, `considered` holds per state
    the distinct samples and their scores, which the rollout engine keeps in the episode's steps."""

    needs_expert = False

    def __init__(self, generator, prm: Critic, n: int):
        self.generator, self.prm, self.n = generator, prm, n
        self.name = self.label(generator.name, n)

    @staticmethod
    def label(generator_name: str, n: int) -> str:
        """The name Best-of-`n` of a generator plays under (rows, tables, `agentprm eval`'s summary)."""
        return f"{generator_name}+bon{n}"

    def act(self, states: Sequence, turns: Sequence[Turn]) -> list[str]:
        samples = self.generator.sample(states, turns, self.n)
        unique = [list(dict.fromkeys(replies)) for replies in samples]   # duplicates need scoring once
        # a state whose samples all agree has nothing to choose: it costs the critic nothing (an oracle critic
        # would play a whole continuation for it)
        contested = [(s, replies) for s, replies in zip(states, unique) if len(replies) > 1]
        flat = [(s, r) for s, replies in contested for r in replies]
        scores = iter(self.prm.score([s for s, _ in flat], [r for _, r in flat]).tolist() if flat else [])
        out, self.considered = [], []
        for replies in unique:
            if len(replies) == 1:
                out.append(replies[0])
                self.considered.append((tuple(replies), ()))
                continue
            q = [next(scores) for _ in replies]
            out.append(replies[max(range(len(replies)), key=q.__getitem__)])   # first of equals, as before
            self.considered.append((tuple(replies), tuple(q)))
        return out
