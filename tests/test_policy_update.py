"""Stage 3 (online DPO against a PRM) and test-time Best-of-N."""
from __future__ import annotations

import math
import random

import pytest
import torch

from agentprm.agent.lm import LMAgent
from agentprm.agent.state import AgentState
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.models import build_model
from agentprm.policy.online_dpo import dpo_loss, train_online_dpo
from agentprm.policy.config import PolicyUpdateConfig
from agentprm.search.best_of_n import BestOfNAgent


class Prefers:
    """A stand-in PRM: Q = 1 for one reply, 0 otherwise; records what it was asked to score."""

    def __init__(self, reply: str):
        self.reply, self.calls = reply, []

    def score(self, states, replies):
        self.calls.append(list(replies))
        return torch.tensor([1.0 if r == self.reply else 0.0 for r in replies])


@pytest.fixture(scope="module")
def states(generated_tasks):
    torch.set_num_threads(1)
    task = load_tasks(generated_tasks.train)[0]
    env, rng, out = AlfWorldEnv(task.game), random.Random(0), []
    turn = env.reset()
    state = AgentState.start(turn, task.task_id)
    for _ in range(6):
        out.append(state)
        action = rng.choice(turn.admissible)
        turn = env.step(action)
        state = state.advance(action, turn)
    env.close()
    return out


def test_dpo_loss_hand_computed():
    loss = dpo_loss(torch.tensor([-1.0]), torch.tensor([-2.0]), torch.tensor([-1.5]), torch.tensor([-1.5]), beta=0.5)
    assert loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(-0.5))), rel=1e-6)
    # a policy that moved away from the preferred reply is penalised more
    worse = dpo_loss(torch.tensor([-2.0]), torch.tensor([-1.0]), torch.tensor([-1.5]), torch.tensor([-1.5]), 0.5)
    assert worse.item() > loss.item()


def mass_of(reply: str, agent: LMAgent, states) -> float:
    """Mean probability the choose-mode policy gives `reply` among the admissible commands."""
    from agentprm.agent.encoding import prompt_ids, reply_ids

    prompts = [prompt_ids(agent.tokenizer, s, agent.prompt_cfg) for s in states]
    cands = [[reply_ids(agent.tokenizer, c) for c in s.admissible] for s in states]
    mass = []
    for s, logp in zip(states, agent.backend.score(prompts, cands)):
        p = torch.softmax(logp, -1)
        mass.append(float(p[list(s.admissible).index(reply)]))
    return sum(mass) / len(mass)


def test_online_dpo_moves_policy_toward_prm_preference(states):
    tok = build_tokenizer()
    agent = LMAgent(build_model("tiny", tok, seed=0), tok, seed=0)
    before = mass_of("inventory", agent, states)
    prm = Prefers("inventory")
    cfg = PolicyUpdateConfig(beta=0.1, samples_per_state=4, temperature=1.0, steps=20, batch_size=6, lr=3e-3)
    history, steered = train_online_dpo(agent, prm, states, cfg, progress=False)
    assert steered == 0
    after = mass_of("inventory", agent, states)
    assert after > before + 0.2, (before, after)
    assert any(h["pair_frac"] > 0 for h in history) and all(0 <= h["pair_frac"] <= 1 for h in history)


def test_online_dpo_reference_is_frozen_previous_policy(states, monkeypatch):
    """The DPO reference is π_{i-1} as it was when the update started: its log-probs stay put while π_θ's move."""
    import agentprm.policy.online_dpo as online_dpo
    from agentprm.agent.encoding import prompt_ids, reply_ids
    from agentprm.agent.scoring import reply_logprobs

    tok = build_tokenizer()
    model = build_model("tiny", tok, seed=1)
    agent = LMAgent(model, tok, seed=0)
    probe = ([prompt_ids(tok, s, agent.prompt_cfg) for s in states[:4]],
             [reply_ids(tok, r) for r in ("inventory", "look", "inventory", "look")])
    before = reply_logprobs(model, *probe, tok.pad_token_id)
    scored = []   # every model the DPO loss asks for log-probs

    def spy(m, *args, **kwargs):
        scored.append(m)
        return reply_logprobs(m, *args, **kwargs)

    monkeypatch.setattr(online_dpo, "reply_logprobs", spy)
    train_online_dpo(agent, Prefers("inventory"), states, PolicyUpdateConfig(steps=3, batch_size=3, lr=1e-2),
                     progress=False)
    references = {id(m): m for m in scored if m is not model}
    assert len(references) == 1            # one reference, not the live policy
    reference = next(iter(references.values()))
    with torch.no_grad():
        assert torch.allclose(reply_logprobs(reference, *probe, tok.pad_token_id), before)
        moved = reply_logprobs(model, *probe, tok.pad_token_id)
    assert (moved - before).abs().max() > 1e-3   # the policy was updated in place


class FixedSamples:
    name = "fixed"

    def __init__(self, samples):
        self.samples = samples

    def sample(self, states, turns, n):
        return [row[:n] for row in self.samples]


def test_best_of_n_acts_with_highest_prm_score():
    gen = FixedSamples([["look", "go to shelf 1", "look"], ["inventory", "help", "examine shelf 1"]])
    prm = Prefers("go to shelf 1")
    agent = BestOfNAgent(gen, prm, n=3)
    assert agent.act([None, None], [None, None]) == ["go to shelf 1", "inventory"]  # ties keep the first sample
    assert prm.calls == [["look", "go to shelf 1", "inventory", "help", "examine shelf 1"]]  # one call, no dups
    assert agent.name == "fixed+bon3"
