"""Process reward shaping: A^μ and the shaped target by hand, V̂^μ from μ's rollouts, shaped targets file round trip,
and a value model that learns the order of V̂^μ."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from agentprm.data.tables import read_targets, write_with_info
from agentprm.data.trajectories import EpisodeRecord, StepRecord, write_episodes_file
from agentprm.prm.value import fit_value_model, model_values, value_targets
from agentprm.targets.mc import targets_from_rollouts
from agentprm.targets.shaping import advantage, shape_targets, shaped_q
from agentprm.train.config import TrainConfig

START = "You are in the middle of a room. Looking quickly around you, you see a drawer 1, and a cabinet 1."
S1 = "You arrive at drawer 1. On the drawer 1, you see a apple 1."


def episode(eid: str, steps: list[tuple[str, str, float]]) -> EpisodeRecord:
    """steps: (observation seen, action, reward); the last step ends the episode, won iff its reward is 1."""
    records = [StepRecord(turn=t, observation=obs, admissible=(), action=act, reward=r, done=t == len(steps) - 1,
                          won=t == len(steps) - 1 and r == 1.0) for t, (obs, act, r) in enumerate(steps)]
    return EpisodeRecord(episode_id=eid, task_id="t0", task_type="pick_and_place_simple",
                         task="put some apple on cabinet.", policy="mu", seed=0, steps=records)


@pytest.fixture
def mu_rollouts(tmp_path):
    """e1 wins via drawer → take; e2 goes to the drawer then looks (truncated); e3 goes to the cabinet (truncated)."""
    return write_episodes_file(tmp_path / "mu.parquet", [
        episode("e1", [(START, "go to drawer 1", 0.0), (S1, "take apple 1 from drawer 1", 1.0)]),
        episode("e2", [(START, "go to drawer 1", 0.0), (S1, "look", 0.0)]),
        episode("e3", [(START, "go to cabinet 1", 0.0)]),
    ])


def test_advantage_and_shaped_target_by_hand():
    r, v = np.array([0.0, 1.0, 0.0]), np.array([0.4, 0.8, 0.5])
    v_next, terminal = np.array([0.6, 0.9, 0.2]), np.array([False, True, True])
    adv = advantage(r, v, v_next, terminal, gamma=0.9)
    assert adv.tolist() == pytest.approx([0.9 * 0.6 - 0.4, 1 - 0.8, -0.5])     # V(s′) ignored at terminal
    q = np.array([0.5, 1.0, 0.0])
    assert shaped_q(q, adv, 0.5).tolist() == pytest.approx([0.25 + 0.5 * 1.14 / 2, 0.5 + 0.5 * 1.2 / 2, 0.5 * 0.25])
    assert shaped_q(q, adv, 0.0).tolist() == pytest.approx(q.tolist())
    assert shaped_q(q, np.array([1.5, -3.0, 0.0]), 1.0).tolist() == [1.0, 0.0, 0.5]   # A clipped to [−1, 1]


def test_value_targets_average_mu_returns(mu_rollouts):
    states, values = value_targets(mu_rollouts, gamma=0.5)
    by_obs = {s.observation: v for s, v in zip(states, values)}
    # START: returns 0.5 (e1, discounted once), 0 (e2), 0 (e3); S1: 1 (e1), 0 (e2)
    assert by_obs == pytest.approx({START: 0.5 / 3, S1: 0.5})


def test_shape_targets_by_hand(mu_rollouts, tmp_path):
    targets = targets_from_rollouts(mu_rollouts, gamma=0.5)
    v = {START: 0.2, S1: 0.6}
    shaped = shape_targets(targets, lambda states: torch.tensor([v[s.observation] for s in states]), 0.5, 0.5)
    got = {a: q for a, q in zip(shaped.table["action"].to_pylist(), shaped.table["q"].to_pylist())}
    assert got == pytest.approx({
        "go to drawer 1": 0.5 * 0.25 + 0.5 * (0.5 * 0.6 - 0.2 + 1) / 2,     # Q̂ 0.25, A = γV(S1) − V(START)
        "take apple 1 from drawer 1": 0.5 * 1.0 + 0.5 * (1 - 0.6 + 1) / 2,  # won: A = r − V(S1)
        "look": 0.5 * 0.0 + 0.5 * (0 - 0.6 + 1) / 2,                        # truncated: V(s′) = 0
        "go to cabinet 1": 0.5 * 0.0 + 0.5 * (0 - 0.2 + 1) / 2,
    })
    assert shaped.info["shaping"]["alpha"] == 0.5
    path = write_with_info(tmp_path / "shaped.parquet", shaped.table, shaped.info)   # train_prm reads it as is
    assert read_targets(path).table["q"].to_pylist() == shaped.table["q"].to_pylist()


def test_value_model_learns_the_order(mu_rollouts):
    torch.set_num_threads(1)
    states, values = value_targets(mu_rollouts, gamma=0.5)
    model = fit_value_model(states, values, "tiny", TrainConfig(lr=3e-3, epochs=60, batch_size=2, seed=0))
    pred = model_values(model)(states).tolist()
    assert pred == pytest.approx(values, abs=0.1)
