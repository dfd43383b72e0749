"""PRM-guided beam search: with a PRM that knows the walkthrough it must win; forks restore envs by replay."""
from __future__ import annotations

import random

import pytest
import torch

from agentprm.agent.state import AgentState
from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.pool import EnvPool
from agentprm.search.beam import beam_search, play_beam


class Shuffled:
    """A stand-in policy: `n` distinct admissible commands per state, in a seeded random order."""

    name = "shuffled"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def sample(self, states, turns, n):
        return [self.rng.sample(list(s.admissible), min(n, len(s.admissible))) for s in states]


class Walkthrough:
    """A stand-in PRM: Q = 1 for the walkthrough's next action at a state on the walkthrough, else 0."""

    def __init__(self, task):
        env = AlfWorldEnv(task.game, expert=True)
        turn = env.reset()
        state, self.next = AgentState.start(turn, task.task_id), {}
        while not turn.done:
            action = turn.info["expert_action"]
            self.next[state.key()] = action
            turn = env.step(action)
            state = state.advance(action, turn)
        env.close()
        assert turn.won
        self.length = len(self.next)

    def score(self, states, replies):
        return torch.tensor([float(self.next.get(s.key()) == r) for s, r in zip(states, replies)])


@pytest.fixture(scope="module")
def task(generated_tasks):
    torch.set_num_threads(1)
    return load_tasks(generated_tasks.train)[1]


@pytest.mark.parametrize("width", [1, 2])
def test_beam_follows_the_prm_to_a_win(task, width):
    prm = Walkthrough(task)
    with EnvPool(1, num_slots=width) as pool:
        result = beam_search(task, Shuffled(), prm, pool, width=width, expand=100, max_steps=prm.length + 5)
    assert result.episode.won and len(result.episode.steps) == prm.length
    assert [s.action for s in result.episode.steps] == list(prm.next.values())
    if width == 2:   # the runner-up child shares its parent with the winner: its env was restored by replay
        assert result.env_steps > 2 * prm.length


def test_every_step_keeps_what_was_weighed_and_its_scores(task, tmp_path):
    """a beam episode's steps and a Best-of-N episode's steps keep the candidates weighed at each turn and
    the critic's scores — through the stored Parquet and back — and the action taken is the best-scored one."""
    from agentprm.data.trajectories import iter_episodes, read_trajectories, write_episodes_file
    from agentprm.rollout.play import play_tasks
    from agentprm.search import BestOfNAgent

    prm = Walkthrough(task)
    with EnvPool(1, num_slots=2) as pool:
        beam = beam_search(task, Shuffled(), prm, pool, width=2, expand=3, max_steps=prm.length + 5).episode

    class Sampler(Shuffled):
        def sample(self, states, turns, n):   # with replacement, so samples may agree
            return [[self.rng.choice(list(s.admissible)) for _ in range(n)] for s in states]

    bon, _ = play_tasks(BestOfNAgent(Sampler(2), prm, 4), [task], per_task=1, seed=0, max_steps=5, tag="t",
                        workers=1, progress=False)
    write_episodes_file(tmp_path / "e.parquet", [beam, *bon])
    stored = {e.episode_id: e for e in iter_episodes(read_trajectories(tmp_path / "e.parquet"))}
    for episode in (beam, bon[0]):
        assert stored[episode.episode_id].steps == episode.steps          # the columns round-trip
        for step in episode.steps:
            assert step.action in step.candidates and len(set(step.candidates)) == len(step.candidates)
            if step.candidate_scores:
                assert len(step.candidate_scores) == len(step.candidates)
                assert step.candidate_scores[step.candidates.index(step.action)] == max(step.candidate_scores)
            else:   # Best-of-N: all samples agreed, nothing was scored
                assert len(step.candidates) == 1
    assert all(len(s.candidates) == 3 and s.candidate_scores for s in beam.steps)   # 3 distinct samples a turn


def test_random_policy_beam_without_a_useful_prm_loses_and_counts_samples(task):
    class Flat:
        def score(self, states, replies):
            return torch.zeros(len(replies))

    with EnvPool(1, num_slots=2) as pool:
        result = beam_search(task, Shuffled(1), Flat(), pool, width=2, expand=3, max_steps=4)
    assert not result.episode.won and len(result.episode.steps) == 4
    assert result.policy_samples == 3 + 3 * 2 * 3   # 1 branch × 3 samples on turn 1, then 2 branches × 3 on 3 turns
    assert result.prm_scores <= result.policy_samples


def test_play_beam_with_an_lm_policy(task):
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model

    tok = build_tokenizer()
    policy = LMAgent(build_model("tiny", tok, seed=0), tok, temperature=1.0, seed=0)
    episodes, summary = play_beam([task], policy, Walkthrough(task), width=2, expand=2, max_steps=3)
    assert len(episodes) == 1 and summary["episodes"] == 1 and summary["policy_samples"] > 0
    assert episodes[0].policy == "lm+beam2x2" and 1 <= len(episodes[0].steps) <= 3


def test_lanes_play_the_same_episodes_as_one_lane(generated_tasks):
    """Each search episode samples from its own seeded stream (LMAgent.fork), so playing two at once in threads
    changes nothing but the wall time; the seed does change the episodes."""
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model
    from agentprm.search import UniformCritic

    tok = build_tokenizer()
    policy = LMAgent(build_model("tiny", tok, seed=0), tok, temperature=1.0, seed=0)
    tasks = load_tasks(generated_tasks.eval)[:3]

    def actions(lanes, seed=7):
        episodes, summary = play_beam(tasks, policy, UniformCritic(1), width=2, expand=2, max_steps=4, seed=seed,
                                      per_task=2, workers=lanes)
        assert [e.episode_id for e in episodes] == [f"beam-s{seed}-{t.task_id}-{k}" for t in tasks for k in (0, 1)]
        return [[s.action for s in e.steps] for e in episodes], summary["env_steps"]

    one = actions(1)
    assert actions(2) == one and actions(1, seed=8) != one


def test_lanes_split_torchs_threads_between_them(generated_tasks, monkeypatch):
    """Each lane runs the model at once: 2 lanes with torch's 2 threads each oversubscribed 2 cores (96 s against
    82 s for 216 games, bench/beam_workers.py). One lane keeps every thread; the count comes back after."""
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model, device
    from agentprm.search import UniformCritic

    class Recording(UniformCritic):
        def score(self, states, replies):
            seen.add(torch.get_num_threads())
            return super().score(states, replies)

    monkeypatch.setattr(device, "_cores", lambda: 4)
    monkeypatch.setattr(device, "_threads_chosen", False)
    tok = build_tokenizer()
    policy = LMAgent(build_model("tiny", tok, seed=0), tok, temperature=1.0, seed=0)
    tasks = load_tasks(generated_tasks.eval)[:2]
    torch.set_num_threads(4)   # given back by conftest's autouse fixture
    for lanes, expected in ((2, {2}), (1, {4})):
        seen: set[int] = set()
        play_beam(tasks, policy, Recording(1), width=2, expand=2, max_steps=3, workers=lanes)
        assert seen == expected, lanes
        assert torch.get_num_threads() == 4


def test_a_forked_agent_samples_its_own_seeded_stream(task):
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model

    tok = build_tokenizer()
    policy = LMAgent(build_model("tiny", tok, seed=0), tok, temperature=5.0, seed=0)
    env = AlfWorldEnv(task.game)
    turn = env.reset()
    env.close()
    state = AgentState.start(turn, task.task_id)
    draw = lambda agent: agent.sample([state] * 8, [turn] * 8, 3)
    a, b = policy.fork(11), policy.fork(11)
    assert draw(a) == draw(b) and draw(a) == draw(b)       # same seed, same stream
    assert draw(policy.fork(12)) != draw(policy.fork(11))
    assert a.backend is policy.backend                     # the model is shared, not copied


def test_every_shipped_critic_has_the_critic_protocols_signature(task):
    """agent/critic.py: search, the updates and the oracle bounds call `score(states, replies)` on any critic."""
    import importlib.util
    import inspect
    from pathlib import Path

    from agentprm.agent.critic import Critic
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.prm.prime import ImplicitPRM
    from agentprm.rollout.oracle import OracleCritic
    from agentprm.search import UniformCritic

    spec = importlib.util.spec_from_file_location("update_ceiling",
                                                  Path(__file__).parents[1] / "scripts" / "update_ceiling.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for cls in (ProcessRewardModel, ImplicitPRM, OracleCritic, UniformCritic, script.TableCritic, Walkthrough):
        assert list(inspect.signature(cls.score).parameters)[:3] == ["self", "states", "replies"], cls
    assert isinstance(UniformCritic(0), Critic) and not isinstance(Shuffled(), Critic)
    env = AlfWorldEnv(task.game)
    start = AgentState.start(env.reset(), task.task_id)
    env.close()
    assert UniformCritic(5).score([start] * 3, ["a", "b", "c"]).shape == (3,)


def test_an_error_in_one_lane_stops_the_others(generated_tasks):
    """A failing episode ends the search with its error; the other lane does not play the rest of the queue."""
    class Failing:
        name, calls = "failing", 0

        def fork(self, seed):
            return self

        def sample(self, states, turns, n):
            Failing.calls += 1
            if Failing.calls == 3:
                raise RuntimeError("backend died")
            return [list(s.admissible)[:n] for s in states]

    tasks = load_tasks(generated_tasks.eval)
    with pytest.raises(RuntimeError, match="backend died"):
        play_beam(tasks * 20, Failing(), Walkthrough(tasks[0]), width=2, expand=2, max_steps=3, workers=2)
    assert Failing.calls < 3 * 10   # 120 episodes of up to 3 turns were queued
