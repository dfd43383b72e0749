"""The Monte-Carlo oracle critic (rollout/oracle.py): replaying to a state and letting a policy finish measures
Q^π(s, a); with the expert finishing, the walkthrough's next action scores highest; distinct candidates."""
from __future__ import annotations

import json

import pytest
import torch

from agentprm.agent.lm import LMAgent
from agentprm.agent.policies import ExpertAgent
from agentprm.agent.state import AgentState
from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.rollout.oracle import OracleCritic
from agentprm.search.best_of_n import BestOfNAgent


def test_walkthrough_action_scores_highest_with_the_expert_finishing(generated_tasks):
    tasks = load_tasks(generated_tasks.train)
    task = tasks[0]
    walk = json.loads((generated_tasks.train / task.game / "game.tw-pddl").read_text())["walkthrough"]
    env = AlfWorldEnv(task.game, max_steps=50)
    state = AgentState.start(env.reset(), task.task_id)
    turn = env.step(walk[0])
    state = state.advance(walk[0], turn)
    env.close()
    assert state.commands == (walk[0],)
    others = [c for c in turn.admissible if c != walk[1]][:4] + ["look"]
    with OracleCritic(tasks, ExpertAgent(), gamma=0.9, max_steps=50, num_envs=4, workers=1) as oracle:
        q = oracle.score([state] * (1 + len(others)), [walk[1], *others])
        assert oracle.errors == 0 and oracle.episodes == 1 + len(others)
        # the expert then finishes in len(walk) - 2 more steps: Q = γ^(steps after the scored one)
        assert q[0] == pytest.approx(0.9 ** (len(walk) - 2))
        assert float(q[0]) > float(q[1:].max())
        ratio = float(q[-1]) / float(q[0])     # "look" wastes turns: Q falls by whole powers of γ
        assert ratio < 1 and any(ratio == pytest.approx(0.9 ** k) for k in (1, 2, 3))
        again = oracle.score([state], [walk[1]])                  # memoised: no new episode
        assert oracle.episodes == 1 + len(others) and torch.equal(again, q[:1])


def test_unknown_task_is_refused(generated_tasks):
    tasks = load_tasks(generated_tasks.train)
    env = AlfWorldEnv(tasks[0].game)
    state = AgentState.start(env.reset(), "not-a-task")
    env.close()
    with OracleCritic(tasks, ExpertAgent(), gamma=0.9, max_steps=5) as oracle, pytest.raises(ValueError, match="task"):
        oracle.score([state], ["look"])


def test_distinct_samples_are_different_commands(tiny_policy, first_turns):
    task, first, _ = first_turns
    state = AgentState.start(first, task.task_id)
    for temperature in (0.0, 1.0):
        agent = LMAgent.load(tiny_policy, temperature=temperature, distinct=True, seed=3)
        (replies,) = agent.sample([state], [first], 4)
        assert len(replies) == 4 == len(set(replies)) and set(replies) <= set(first.admissible)
    greedy = LMAgent.load(tiny_policy, distinct=True)
    (top,) = greedy.sample([state], [first], len(first.admissible) + 3)   # capped at the admissible set
    assert sorted(top) == sorted(first.admissible)
    assert top[0] == LMAgent.load(tiny_policy).act([state], [first])[0]   # the first is greedy's pick


def test_best_of_n_does_not_score_uncontested_states(tiny_policy, first_turns):
    task, first, _ = first_turns
    state = AgentState.start(first, task.task_id)

    class Counting:
        calls = 0

        def score(self, states, replies):
            Counting.calls += len(replies)
            return torch.arange(len(replies), dtype=torch.float32)

    agent = BestOfNAgent(LMAgent.load(tiny_policy), Counting(), 4)   # greedy: four equal samples
    assert agent.act([state], [first]) == LMAgent.load(tiny_policy).act([state], [first])
    assert Counting.calls == 0
    distinct = BestOfNAgent(LMAgent.load(tiny_policy, distinct=True), Counting(), 3)
    top = LMAgent.load(tiny_policy, distinct=True).sample([state], [first], 3)[0]
    assert distinct.act([state], [first]) == [top[2]] and Counting.calls == 3   # the highest score wins
