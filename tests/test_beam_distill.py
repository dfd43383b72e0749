"""Expert iteration with PRM-guided beam search (policy/beam_distill.py): the critic steers the search, the won search
episodes are imitated, and π's greedy choices move to the critic's; the uniform control critic is seeded."""
from __future__ import annotations

import json

import pytest
import torch

from agentprm.agent.lm import LMAgent
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.errors import UserError
from agentprm.policy.config import PolicyUpdateConfig
from agentprm.policy.update import UpdateContext, run_update
from agentprm.search import UniformCritic


class FollowsWalkthrough:
    """Q = 1 for the walkthrough's next command of the state's task, else 0: a critic that knows the way."""

    def __init__(self, walks: dict[str, list[str]]):
        self.walks = walks

    def score(self, states, replies):
        return torch.tensor([float(len(s.commands) < len(self.walks[s.task_id])
                                   and r == self.walks[s.task_id][len(s.commands)]) for s, r in zip(states, replies)])


def _walks(root, tasks):
    return {t.task_id: json.loads((root / t.game / "game.tw-pddl").read_text())["walkthrough"] for t in tasks}


def test_distilling_a_critic_guided_beam_moves_pi_to_the_critics_path(generated_tasks, tiny_policy):
    tasks = load_tasks(generated_tasks.train)[:2]
    walks = _walks(generated_tasks.train, tasks)
    # distinct sampling with expand ≥ the admissible set: the beam sees every command, so it follows the walkthrough
    policy = LMAgent.load(tiny_policy)
    first_before = [policy.act([s], [t])[0] for s, t in _first_states(tasks)]
    cfg = PolicyUpdateConfig(method="beam-distill", search_width=1, search_expand=200, temperature=1.0, distinct=True,
                             steps=40, batch_size=4, lr=3e-3)
    result = run_update(policy, FollowsWalkthrough(walks), [], cfg, UpdateContext(
        0, str(tiny_policy), progress=False, tasks=tasks, max_steps=max(map(len, walks.values())) + 2, workers=1))
    meta = result.meta()["beam_distill"]
    assert result.method == "beam-distill" and meta["history"] == result.history
    assert meta["search"]["success_rate"] == 1.0 and meta["episodes_kept"] == 2
    assert meta["examples"] == sum(map(len, walks.values()))      # one example per walkthrough step
    assert 0 < meta["corrections"] <= meta["examples"]             # steps where untrained π's greedy pick differs
    assert meta["history"][-1]["loss"] < meta["history"][0]["loss"]
    first_after = [policy.act([s], [t])[0] for s, t in _first_states(tasks)]
    assert first_after == [walks[t.task_id][0] for t in tasks]
    assert first_before != first_after                             # the untrained policy did not already do it


def test_nothing_won_is_refused_with_won_only(generated_tasks, tiny_policy):
    tasks = load_tasks(generated_tasks.train)[:1]
    policy = LMAgent.load(tiny_policy)
    cfg = PolicyUpdateConfig(method="beam-distill", search_width=1, search_expand=1, steps=1)
    with pytest.raises(UserError, match="none of the 1 search episodes won"):
        run_update(policy, UniformCritic(0), [], cfg, UpdateContext(0, str(tiny_policy), progress=False,
                                                                    tasks=tasks, max_steps=2, workers=1))


class _Keyed:
    def __init__(self, key: str):
        self._key = key

    def key(self) -> str:
        return self._key


def test_uniform_critic_is_a_seeded_hash_of_the_pair_and_checks_lengths():
    states, replies = [_Keyed(f"s{k % 2}") for k in range(6)], [f"a{k // 2}" for k in range(6)]
    a = UniformCritic(3).score(states, replies)
    assert torch.equal(a, UniformCritic(3).score(states, replies)) and a.dtype == torch.float32
    assert not torch.equal(a, UniformCritic(4).score(states, replies))
    assert len(set(a.tolist())) == 6 and ((a >= 0) & (a < 1)).all()          # six distinct pairs
    # the same pair scores the same whenever and wherever it is asked: call order does not matter
    assert torch.equal(UniformCritic(3).score(states[::-1], replies[::-1]), a.flip(0))
    assert UniformCritic(3).score([_Keyed("s0")], ["a0"]).item() == a[0].item()
    with pytest.raises(ValueError):
        UniformCritic(0).score([_Keyed("s")], ["x", "y"])


def _first_states(tasks):
    from agentprm.agent.state import AgentState
    from agentprm.envs.alfworld.engine import AlfWorldEnv

    out = []
    for task in tasks:
        env = AlfWorldEnv(task.game)
        first = env.reset()
        env.close()
        out.append((AgentState.start(first, task.task_id), first))
    return out


def test_the_loop_reads_every_updates_saved_record():
    """loop/run.py looked up "online_dpo", "kl_distill" and "policy_gradient" by hand, so beam-distill's training
    history never reached the report's plots; `UpdateResult.read` reads back the record of any registered update (and
    of the policy-gradient algorithms), typed, from the saved agentprm.json."""
    from agentprm.policy.update import POLICY_GRADIENT, UPDATES, UpdateResult

    assert {"online-dpo", "kl-distill", "beam-distill"} <= set(UPDATES)
    for method in (*UPDATES, POLICY_GRADIENT):
        result = UpdateResult(method, [{"step": 1, "loss": 0.5}], {"lr": 0.1}, 3, "pi0", {"corrections": 7})
        meta = json.loads(json.dumps({"prompt": {}, **result.meta()}))    # as saved and read back
        assert UpdateResult.read(meta) == result
    assert UpdateResult.read({"prompt": {}}) is None and UpdateResult.key("beam-distill") == "beam_distill"
    # the on-disk layout of runs saved before the registry: still read
    old = {"online_dpo": {"config": {}, "seed": 1, "reference": "r", "history": [], "steered_states": 0}}
    assert UpdateResult.read(old) == UpdateResult("online-dpo", [], {}, 1, "r", {"steered_states": 0})
