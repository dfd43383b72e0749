"""eval/drift.py (the loop's `kl_to_pi0`, scripts/policy_drift.py): KL(π_i ‖ π0) over the admissible commands of
the states π0 visits — zero for π0 itself, positive for another policy, and KL computed from the same
log-probabilities the agent picks with."""
from __future__ import annotations

import pytest
import torch

from agentprm.agent.lm import LMAgent
from agentprm.agent.policies import ExpertAgent
from agentprm.data.trajectories import write_episodes_file
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.eval.drift import DriftReference, command_log_probs, drift, visited_states
from agentprm.rollout.engine import episode_jobs, run_episodes


@pytest.fixture(scope="module")
def episodes(generated_tasks, tmp_path_factory):
    tasks = load_tasks(generated_tasks.eval)[:3]
    episodes = run_episodes(episode_jobs(tasks, 1, 0, 200, "expert"), ExpertAgent(), num_envs=3, num_workers=1,
                            progress=False)
    return write_episodes_file(tmp_path_factory.mktemp("drift") / "pi0.parquet", episodes)


def test_kl_is_zero_for_pi0_itself_and_positive_for_another_policy(episodes, tiny_policy):
    states = visited_states(episodes, 24)
    assert len(states) == 24 and all(len(s.admissible) >= 2 for s in states)
    bundled = LMAgent.load("agentprm/assets/policy")
    reference = command_log_probs(bundled, states)
    assert all(torch.isclose(lp.exp().sum(), torch.tensor(1.0, dtype=lp.dtype)) for lp in reference)
    same = drift(reference, reference)
    assert same["kl_to_pi0"] == 0.0 and same["greedy_agrees_with_pi0"] == 1.0 and same["states"] == 24
    other = drift(reference, command_log_probs(LMAgent.load(tiny_policy), states))
    assert other["kl_to_pi0"] > 0.1 and other["greedy_agrees_with_pi0"] < 1.0
    # π0's greedy pick is the argmax of the same distribution: what the agent acts on
    picks = bundled.act(states, [None] * len(states))
    assert picks == [s.admissible[int(lp.argmax())] for s, lp in zip(states, reference)]


def test_policy_drift_of_two_folders_is_the_drift_of_their_log_probs(episodes, tiny_policy):
    bundled = "agentprm/assets/policy"
    reference = DriftReference.of(bundled, episodes, 24)
    assert reference.measure(bundled)["kl_to_pi0"] == 0.0
    states = visited_states(episodes, 24)
    want = drift(command_log_probs(LMAgent.load(bundled), states), command_log_probs(LMAgent.load(tiny_policy), states))
    assert reference.measure(tiny_policy) == want
