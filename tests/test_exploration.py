"""Exploration: Reset-50-50 honours its fraction with a seeded RNG, replays exactly the expert's prefix in the real
env before handing over to the policy, and marks the prefix so InversePRM's D⁻ leaves it out; the steered prompt."""
from __future__ import annotations

import pytest

from agentprm.agent.policies import ExpertAgent
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.prm.inverse import episode_transitions
from agentprm.rollout.engine import episode_jobs, run_episodes
from agentprm.rollout.reset import expert_actions, reset_jobs

SHORT_TYPES = ("pick_and_place_simple", "look_at_obj_in_light")


def test_reset_fraction_is_honoured_and_seeded(generated_tasks):
    tasks = load_tasks(generated_tasks.train)
    demos = {t.task_id: [f"go to cabinet {k}" for k in range(1, 6)] for t in tasks[:-1]}
    demos[tasks[-1].task_id] = ["look"]                        # one step: nothing left to hand over, never reset
    jobs = reset_jobs(tasks, demos, per_task=4, seed=3, max_steps=10, tag="r", reset_frac=0.5)
    reset = [j for j in jobs if j.start_actions]
    assert len(jobs) == 24 and len(reset) == 12
    for j in reset:
        k = j.origin_turn
        assert j.origin == "reset" and 1 <= k <= 4 and j.start_actions == tuple(demos[j.task.task_id][:k]) and j.max_steps == 10 + k
        assert j.task.task_id != tasks[-1].task_id
    assert jobs == reset_jobs(tasks, demos, per_task=4, seed=3, max_steps=10, tag="r", reset_frac=0.5)
    assert jobs != reset_jobs(tasks, demos, per_task=4, seed=4, max_steps=10, tag="r", reset_frac=0.5)
    assert reset_jobs(tasks, demos, 4, 3, 10, "r", 0.0) == episode_jobs(tasks, 4, 3, 10, "r")
    assert len([j for j in reset_jobs(tasks, demos, 4, 3, 10, "r", 1.0) if j.start_actions]) == 20   # all eligible


class RecordingAgent:
    """Plays "look" and remembers the turn index (state.steps) of every state it was asked to act on."""
    name, needs_expert = "recorder", False

    def __init__(self):
        self.asked: list[int] = []

    def act(self, states, turns):
        self.asked += [s.steps for s in states]
        return ["look"] * len(states)


def test_replayed_prefix_is_the_experts_then_the_policy_acts(generated_tasks):
    tasks = load_tasks(generated_tasks.train, list(SHORT_TYPES))
    demos = run_episodes(episode_jobs(tasks, 1, 0, 50, "expert"), ExpertAgent(), num_envs=2, num_workers=1,
                         progress=False)
    assert all(d.won for d in demos)
    jobs = reset_jobs(tasks, expert_actions(demos), per_task=1, seed=0, max_steps=2, tag="r", reset_frac=1.0)
    agent = RecordingAgent()
    episodes = run_episodes(jobs, agent, num_envs=2, num_workers=1, progress=False)
    by_task = {d.task_id: d for d in demos}
    for e in episodes:
        k, demo = e.origin_turn, by_task[e.task_id]
        assert k >= 1 and len(e.steps) == k + 2                       # the policy still gets its 2 steps
        assert [s.action for s in e.steps[:k]] == [s.action for s in demo.steps[:k]]
        assert [s.observation for s in e.steps[:k + 1]] == [s.observation for s in demo.steps[:k + 1]]
        assert [s.action for s in e.steps[k:]] == ["look", "look"]
        assert e.origin == "reset" and list(e.policy_turns()) == [k, k + 1]
        # InversePRM's D⁻: only π's turns (the last one has no stored s′: truncated, not won)
        assert [t.reply for t in episode_transitions(e, expert=False, start=k)] == ["look"]
    assert sorted(agent.asked) == sorted(t for e in episodes for t in e.policy_turns())


def fake_state(admissible=("go to drawer 1", "go to cabinet 1", "look", "inventory")):
    from agentprm.agent.state import AgentState
    from agentprm.envs.base import Turn

    start = "You are in the middle of a room. Looking quickly around you, you see a drawer 1, and a cabinet 1."
    state = AgentState.start(Turn("put some apple on cabinet.", start, admissible), "t0")
    return state.advance("look", Turn("put some apple on cabinet.", "Nothing happens.", admissible))


def test_steered_prompt_lists_untried_actions_in_known_words():
    from agentprm.agent.format import state_to_messages, steered_messages
    from agentprm.agent.tokenizer import build_tokenizer

    state = fake_state()
    plain, steered = state_to_messages(state), steered_messages(state)
    assert steered != plain and steered[0] == plain[0]
    assert steered[1]["content"] == plain[1]["content"] + "\nActions: go to drawer 1 | go to cabinet 1 | inventory"
    tok = build_tokenizer()
    assert tok.unk_token_id not in tok(steered[1]["content"])["input_ids"]
    everything_tried = fake_state(admissible=("look",))
    assert steered_messages(everything_tried)[1]["content"].endswith("\nActions: look")


@pytest.mark.parametrize("frac", [0.0, 0.3, 1.0])
def test_steered_sampler_rate_is_the_configured_one(frac):
    import random

    import torch

    from agentprm.agent.lm import LMAgent
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model
    from agentprm.policy.online_dpo import SteeredSampler

    torch.set_num_threads(1)
    tok = build_tokenizer()
    agent = LMAgent(build_model("tiny", tok, seed=0), tok, temperature=1.0, seed=0)
    prompts = []
    score = agent.backend.score
    agent.backend.score = lambda p, c: prompts.extend(p) or score(p, c)
    states = [fake_state()] * 100
    sampler = SteeredSampler(agent, frac, seed=7)
    replies = sampler.sample(states, [None] * len(states), 2)
    rng = random.Random(7)
    expected = sum(rng.random() < frac for _ in states)
    assert sampler.steered == expected and abs(expected / len(states) - frac) < 0.1
    assert all(len(r) == 2 and set(r) <= set(states[0].admissible) for r in replies)
    with_actions = sum("Actions:" in tok.decode(p) for p in prompts)
    assert with_actions == expected       # steered states got the steered prompt, the others the policy's own
