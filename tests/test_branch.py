"""Branching rollouts (agentprm/rollout/branch.py): which turns branch, what the branch replays, and how Q-targets
count branch episodes."""
import pytest

from agentprm.agent.replay import episode_states
import pyarrow as pa

from agentprm.data.trajectories import with_provenance
from agentprm.envs.base import TaskSpec
from agentprm.rollout.branch import branch_jobs
from agentprm.targets.mc import mc_targets
from test_targets import START, S1, as_table, episode


class ScriptedSampler:
    """`sample` answers by observation: the replies π would draw there."""

    def __init__(self, by_observation: dict[str, list[str]]):
        self.by_observation, self.calls = by_observation, 0

    def sample(self, states, turns, n):
        self.calls += 1
        return [(self.by_observation.get(s.observation, ["look"]) * n)[:n] for s in states]


def task(task_id: str) -> TaskSpec:
    return TaskSpec(task_id=task_id, task_type="pick_and_place_simple", game=f"/games/{task_id}", floorplan=1)


def test_first_target_turn_and_policy_turns_come_from_the_provenance_columns():
    steps = [(f"obs {k}", "look", 0.0) for k in range(6)]
    branch, reset, plain = (episode("x", steps, origin="branch", origin_turn=4),
                            episode("x", steps, origin="reset", origin_turn=3), episode("x-branch5", steps))
    assert (branch.first_target_turn(), reset.first_target_turn(), plain.first_target_turn()) == (4, 0, 0)
    assert (branch.policy_turns(), reset.policy_turns(), plain.policy_turns()) == (range(0, 6), range(3, 6),
                                                                                   range(0, 6))


def test_shards_written_before_the_provenance_columns_get_them_from_the_ids():
    old = pa.table({"episode_id": ["r-s0-t3-2-branch7", "r-s0-t3-2", "r-s0-t3-2-reset4", "r-s0-t3-2"]})
    new = with_provenance(old)
    assert new["origin"].to_pylist() == ["branch", "", "reset", ""]
    assert new["origin_turn"].to_pylist() == [7, 0, 4, 0] and new["origin_turn"].type == pa.int32()
    assert with_provenance(new) is new   # a table that has them is left alone: ids are never parsed again


def test_branches_replay_the_prefix_then_play_another_action_where_pi_would():
    e = episode("a", [(START, "go to drawer 1", 0.0), (S1, "take apple 1", 0.0), ("Nothing happens.", "look", 0.0)])
    sampler = ScriptedSampler({START: ["go to drawer 1", "go to cabinet 1"],    # π has an alternative at turn 0 ...
                               S1: ["take apple 1"],                           # ... none at turn 1 ...
                               "Nothing happens.": ["look", "inventory", "look"]})  # ... one at turn 2
    jobs = branch_jobs([e], [task("t0")], sampler, per_episode=5, probe=4, seed=0, max_steps=30)
    assert [(j.episode_id, j.start_actions) for j in jobs] == [
        ("a-branch0", ("go to cabinet 1",)),                  # turn 0: the other action, nothing replayed
        ("a-branch2", ("go to drawer 1", "take apple 1", "inventory"))]  # turns 0-1 replayed, then the other
    assert all(j.max_steps == 30 and j.task.task_id == "t0" for j in jobs)


def test_branch_count_is_capped_and_seeded():
    steps = [(f"obs {k}", f"go to drawer {k}", 0.0) for k in range(10)]
    e = episode("a", steps)
    sampler = ScriptedSampler({f"obs {k}": ["look"] for k in range(10)})
    one = branch_jobs([e], [task("t0")], sampler, per_episode=3, probe=2, seed=1, max_steps=30)
    again = branch_jobs([e], [task("t0")], sampler, per_episode=3, probe=2, seed=1, max_steps=30)
    assert [j.episode_id for j in one] == [j.episode_id for j in again] and len(one) == 3
    for j in one:
        k = j.origin_turn
        assert j.origin == "branch" and j.episode_id == f"a-branch{k}"
        assert j.start_actions == tuple(f"go to drawer {t}" for t in range(k)) + ("look",)


def test_targets_count_a_branch_from_its_branch_turn():
    original = episode("a", [(START, "go to drawer 1", 0.0), (S1, "take apple 1", 1.0)])
    # replays turn 0, then plays another action at S1 and loses: turn 0's target must stay the original's
    branch = episode("a-branch1", [(START, "go to drawer 1", 0.0), (S1, "look", 0.0), (S1, "inventory", 0.0)],
                     origin="branch", origin_turn=1)
    rows = mc_targets(as_table([original, branch]), gamma=0.5).to_pylist()
    got = {(r["turn"], r["action"]): (r["q"], r["visits"]) for r in rows}
    assert got == {(0, "go to drawer 1"): (0.5, 1),        # the branch's replayed turn 0 is not a visit
                   (1, "take apple 1"): (1.0, 1),
                   (1, "look"): (0.0, 1),                 # same state as "take apple 1": the contrast we want
                   (2, "inventory"): (0.0, 1)}
    keys = {(r["turn"], r["action"]): r["state_key"] for r in rows}
    assert keys[(1, "take apple 1")] == keys[(1, "look")]
    states = [s for s, _ in episode_states(branch)]
    assert states[1].key() == keys[(1, "look")]


def test_loop_rollouts_with_branches_on_real_games(tmp_path, generated_tasks, tiny_policy):
    """Each branch episode replays its parent's turns exactly, then acts otherwise at the branch turn; the targets
    then hold two actions at those states."""
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.loop.config import from_dict
    from agentprm.loop.run import Loop
    from agentprm.targets.mc import targets_from_rollouts

    cfg = from_dict({"tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval)},
                     "rollout": {"per_task": 1, "max_steps": 6, "num_envs": 4, "workers": 2, "branches": 2}})
    loop = Loop(cfg, tmp_path / "run", progress=False)
    train, _ = loop.tasks()
    episodes = {e.episode_id: e for e in iter_episodes(read_trajectories(loop.rollouts(1, tiny_policy, train)))}
    branches = [e for e in episodes.values() if e.origin == "branch"]
    assert len(episodes) - len(branches) == len(train) and len(branches) > len(train)  # an untrained π wavers
    for b in branches:
        k = b.origin_turn
        parent = episodes[b.episode_id.rsplit("-branch", 1)[0]]
        assert [s.observation for s in b.steps[:k + 1]] == [s.observation for s in parent.steps[:k + 1]]
        assert [s.action for s in b.steps[:k]] == [s.action for s in parent.steps[:k]]
        assert b.steps[k].action != parent.steps[k].action and len(b.steps) <= 6
    targets = targets_from_rollouts(tmp_path / "run" / "iter_1" / "rollouts", 1.0).table
    per_state = targets.group_by("state_key").aggregate([("action", "count")])
    assert max(per_state["action_count"].to_pylist()) >= 2


def test_branches_are_for_agentprm_only(tmp_path):
    from agentprm.errors import UserError
    from agentprm.loop.config import from_dict

    with pytest.raises(UserError, match="rollout.branches"):
        from_dict({"algo": "grpo", "rollout": {"branches": 1}}, "c.yaml")
    with pytest.raises(UserError, match="c.yaml: field 'rollout.branches' must be >= 0"):
        from_dict({"rollout": {"branches": -1}}, "c.yaml")
    with pytest.raises(UserError, match="c.yaml: field 'rollout.branch_probe' must be >= 1"):
        from_dict({"rollout": {"branches": 1, "branch_probe": 0}}, "c.yaml")
