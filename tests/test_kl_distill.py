"""The KL-regularised choose-mode update (policy/kl_distill.py): the target tilts π_ref by exp(Q/β) on the candidates
only, keeps their mass, and training moves π toward it."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from agentprm.agent.encoding import prompt_ids
from agentprm.agent.lm import LMAgent
from agentprm.agent.state import AgentState
from agentprm.policy.kl_distill import tilted_target, train_kl_distill
from agentprm.policy.config import PolicyUpdateConfig


def test_tilted_target_values():
    ref = F.log_softmax(torch.tensor([2.0, 1.0, 0.0, -1.0]), -1)
    chosen = torch.tensor([0, 2])
    q = torch.tensor([0.2, 0.5])
    t = tilted_target(ref, q, chosen, beta=0.1)
    p = ref.exp()
    assert t.sum() == pytest.approx(1.0)
    assert t[1] == pytest.approx(p[1]) and t[3] == pytest.approx(p[3])          # non-candidates untouched
    assert t[0] + t[2] == pytest.approx(p[0] + p[2])                            # candidates keep their mass
    assert float(t[2] / t[0]) == pytest.approx(float(p[2] / p[0]) * math.exp((0.5 - 0.2) / 0.1), rel=1e-5)
    # β → ∞: no tilt at all
    assert torch.allclose(tilted_target(ref, q, chosen, beta=1e6), p, atol=1e-6)


class PrefersOne:
    """A critic that values one command at 1 and every other at 0."""

    def __init__(self, command: str):
        self.command = command

    def score(self, states, replies):
        return torch.tensor([1.0 if r == self.command else 0.0 for r in replies])


def test_training_moves_pi_toward_the_critics_choice(tiny_policy, first_turns):
    task, first, _ = first_turns
    state = AgentState.start(first, task.task_id)
    agent = LMAgent.load(tiny_policy)

    def choose_probs():
        logp = agent.backend.score([prompt_ids(agent.tokenizer, state, agent.prompt_cfg)],
                                   [[agent._ids(c) for c in state.admissible]])[0]
        return F.softmax(logp, -1)

    before = choose_probs()
    second = state.admissible[int(before.topk(2).indices[1])]   # π_ref's runner-up
    ref_weights = {k: v.clone() for k, v in agent.backend.model.state_dict().items()}
    cfg = PolicyUpdateConfig(method="kl-distill", beta=0.1, candidates=4, steps=30, batch_size=1, lr=3e-3)
    history = train_kl_distill(agent, PrefersOne(second), [state], cfg, progress=False)
    after = choose_probs()
    k = state.admissible.index(second)
    assert after[k] > before[k] + 0.2
    assert agent.act([state], [first]) == [second]                      # the greedy pick moved to the critic's
    assert history[0]["argmax_moved"] == 1.0 and history[0]["target_kl"] > 0
    assert any(not torch.equal(v, agent.backend.model.state_dict()[n]) for n, v in ref_weights.items())
