"""an environment is a registered name (agentprm/envs/registry.py). A toy environment defined outside the
package (tests/toy_env.py) runs rollouts, Monte-Carlo targets, PRM training and beam search with the PRM; one that
cannot be replayed is refused by what restores states by replay."""
from __future__ import annotations

import pytest
import toy_env

from agentprm.envs.base import TaskSpec, TextEnv
from agentprm.envs.registry import ENVS, env_factory, get_env
from agentprm.errors import UserError

TASKS = [TaskSpec(f"count-{k}", "count", str(k % 2 + 1), env="test-counter") for k in range(4)]


def test_a_registered_env_is_made_by_name_and_unknown_ones_are_listed():
    env = env_factory(TASKS[1], max_steps=5)()
    assert isinstance(env, TextEnv) and env.reset().observation == "The counter shows 0."
    assert [env.step("add one").won, env.step("add one").won] == [False, True]
    assert get_env("alfworld").replayable and not get_env("test-counter-once").replayable
    with pytest.raises(UserError, match="unknown environment 'nope'; known: alfworld, scienceworld, sokoban, test-counter"):
        get_env("nope")
    with pytest.raises(ValueError, match="'test-counter' is registered already"):
        toy_env.register_env("test-counter")(toy_env.make_counter)
    assert set(ENVS) >= {"alfworld", "test-counter", "test-counter-once"}


def test_a_toy_env_runs_rollouts_targets_prm_and_beam(tmp_path, tiny_policy):
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.policies import RandomAgent
    from agentprm.data.tables import write_with_info
    from agentprm.data.trajectories import ShardWriter, iter_episodes, read_trajectories
    from agentprm.prm.loading import load_prm
    from agentprm.prm.train import train_prm
    from agentprm.rollout.play import play_tasks
    from agentprm.search import play_beam
    from agentprm.targets.mc import targets_from_rollouts
    from agentprm.train.config import TrainConfig

    with ShardWriter(tmp_path / "rollouts") as writer:   # in env worker processes, as every rollout
        episodes, summary = play_tasks(RandomAgent(0), TASKS, per_task=4, seed=0, max_steps=4, tag="toy",
                                       workers=1, writer=writer, progress=False)
    assert summary["episodes"] == 16 and not any(e.error for e in episodes)
    assert 0 < summary["success_rate"] < 1     # a random walk reaches 1 or 2 in 4 steps sometimes, not always
    stored = list(iter_episodes(read_trajectories(tmp_path / "rollouts")))
    assert {e.task_type for e in stored} == {"count"} and stored[0].steps[0].observation == "The counter shows 0."

    t = targets_from_rollouts(tmp_path / "rollouts", gamma=0.9)
    q = t.table["q"].to_pylist()
    pairs = list(zip(t.table["state_key"].to_pylist(), t.table["action"].to_pylist()))
    assert len(set(pairs)) == len(q) <= sum(len(e.steps) for e in stored)   # one Q̂ per (state, action)
    assert max(q) == 1.0 and min(q) == 0.0
    write_with_info(tmp_path / "q.parquet", t.table, t.info)
    metrics = train_prm(tmp_path / "q.parquet", tiny_policy, "soft-bce", tmp_path / "prm",
                        TrainConfig(epochs=1, batch_size=8))
    assert metrics["examples"] > 0 and (tmp_path / "prm" / "agentprm.json").is_file()

    policy = LMAgent.load(tiny_policy, mode="choose", temperature=1.0, seed=0)
    beam_episodes, beam = play_beam(TASKS[:2], policy, load_prm(tmp_path / "prm"), width=2, expand=2, max_steps=4)
    assert beam["episodes"] == 2 and all(e.steps for e in beam_episodes)
    assert all(s.action in toy_env.COMMANDS for e in beam_episodes for s in e.steps)


def test_an_env_that_cannot_be_replayed_is_refused_by_beam_and_branching(tiny_policy):
    from agentprm.agent.policies import RandomAgent
    from agentprm.rollout.engine import EpisodeJob, run_episodes
    from agentprm.search import UniformCritic, play_beam

    once = TaskSpec("once", "count", "1", env="test-counter-once")
    with pytest.raises(UserError, match="^beam search restores states by replaying commands, and environment "
                                        "'test-counter-once' cannot be replayed"):
        play_beam([once], RandomAgent(0), UniformCritic(0), width=2, expand=2, max_steps=3)
    with pytest.raises(UserError, match="^starting an episode from a recorded state .* 'test-counter-once'"):
        run_episodes([EpisodeJob(once, "b", start_actions=("add one",))], RandomAgent(0), progress=False)
    episodes = run_episodes([EpisodeJob(once, "a", max_steps=3)], RandomAgent(0), num_workers=1, progress=False)
    assert len(episodes) == 1 and not episodes[0].error   # playing it from the start is fine


def test_an_installed_package_registers_its_env_through_an_entry_point(tmp_path, monkeypatch):
    """A package of the user's registers without touching agentprm: its distribution's entry point of the group
    agentprm.envs names the module that registers the env, imported on first use of the name."""
    site = tmp_path / "site"
    (site / "my_env_pkg-0.1.dist-info").mkdir(parents=True)
    (site / "my_env_pkg-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: my-env-pkg\n"
                                                               "Version: 0.1\n")
    (site / "my_env_pkg-0.1.dist-info" / "entry_points.txt").write_text("[agentprm.envs]\n"
                                                                       "test-from-a-package = my_env_pkg\n")
    (site / "my_env_pkg.py").write_text("from agentprm.envs.registry import register_env\n"
                                        "from toy_env import CounterEnv\n\n"
                                        "@register_env('test-from-a-package')\n"
                                        "def make(task, max_steps, expert):\n"
                                        "    return CounterEnv(task, max_steps)\n")
    monkeypatch.syspath_prepend(str(site))
    assert "test-from-a-package" not in ENVS
    try:
        task = TaskSpec("t", "count", "1", env="test-from-a-package")
        assert env_factory(task, max_steps=3)().reset().task == "make the counter show 1."
    finally:
        ENVS.pop("test-from-a-package", None)
