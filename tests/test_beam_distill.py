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


def _distill_study():
    import importlib.util
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    sys.path.insert(0, str(scripts))   # it imports its sibling bon_at_scale.py
    try:
        spec = importlib.util.spec_from_file_location("distill_at_scale", scripts / "distill_at_scale.py")
        study = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(study)
    finally:
        sys.path.remove(str(scripts))
    return study


def test_the_distill_study_searches_the_first_games_of_the_train_folder(generated_tasks, tmp_path):
    """scripts/distill_at_scale.py's search set: the first N games of a task folder, as a task folder of its own
    that `load_tasks` reads (a game must sit inside its folder: hard links, not symbolic ones), the source untouched;
    made once (a second call reads it) and more games than the folder holds refused."""
    import os
    from pathlib import Path

    study = _distill_study()
    source = load_tasks(generated_tasks.train)
    out = study.first_games(generated_tasks.train, 4, tmp_path / "train4")
    subset = load_tasks(out)
    assert [t.task_id for t in subset] == [t.task_id for t in source[:4]]
    game = next(p for p in Path(subset[0].game).iterdir() if p.is_file())
    original = Path(source[0].game) / game.name
    assert not game.is_symlink() and os.path.samefile(game, original)
    assert [t.task_id for t in load_tasks(generated_tasks.train)] == [t.task_id for t in source]
    assert study.first_games(generated_tasks.train, 4, out) == out
    with pytest.raises(SystemExit, match="made from other games than the first 3"):   # not silently reused
        study.first_games(generated_tasks.train, 3, out)
    assert [t.task_id for t in load_tasks(out)] == [t.task_id for t in source[:4]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train4"]   # no copy left half-made beside it
    with pytest.raises(SystemExit, match=f"--games {len(source) + 1}: .* lists {len(source)}"):
        study.first_games(generated_tasks.train, len(source) + 1, tmp_path / "too-many")
    assert not (tmp_path / "too-many").exists()


def test_the_distill_study_keeps_the_search_episodes_that_beat_greedy_pi0():
    """`--keep better`: a won search episode is kept where greedy π0 lost that game or won it in more turns; a
    search that lost, errored, tied greedy's length or played a game greedy did not is left out. `--keep best` adds
    greedy π0's won episode of each game no kept search episode covers."""
    from agentprm.data.trajectories import EpisodeRecord, StepRecord

    def ep(eid, task, turns, won, error=""):
        steps = [StepRecord(turn=t, observation="o", admissible=(), action="look", done=t == turns - 1,
                            won=won and t == turns - 1) for t in range(turns)]
        return EpisodeRecord(eid, task, "pick_and_place_simple", "goal", "pi0", 0, steps, error=error)

    greedy = [ep("g-a", "a", 5, False), ep("g-b", "b", 6, True), ep("g-c", "c", 4, True), ep("g-d", "d", 3, False)]
    search = [ep("s-a", "a", 9, True),          # greedy lost: kept
              ep("s-b", "b", 4, True),          # greedy won in 6: kept
              ep("s-c", "c", 4, True),          # as long as greedy's: not
              ep("s-d", "d", 3, False),         # lost: not
              ep("s-d2", "d", 3, True, "env died"),   # errored: not
              ep("s-e", "e", 2, True)]          # greedy did not play e: not
    study = _distill_study()
    assert [e.episode_id for e in study.better(search, greedy)] == ["s-a", "s-b"]
    # --keep best: those, and greedy π0's own won episode of every game the search did not improve (c; not d: lost)
    assert [e.episode_id for e in study.best(search, greedy)] == ["s-a", "s-b", "g-c"]
    # --copies 3: each correction three times under ids of their own (rows group by id), the anchor once
    copied = study.best(search, greedy, copies=3)
    assert [e.episode_id for e in copied] == ["s-a", "s-a-x1", "s-a-x2", "s-b", "s-b-x1", "s-b-x2", "g-c"]
    assert [len(e.steps) for e in copied] == [9, 9, 9, 4, 4, 4, 4] and search[0].episode_id == "s-a"


@pytest.mark.parametrize("flags, message", [
    (["--keep", "better", "--copies", "2"], "--copies 2: expected a count >= 1, above 1 only with --keep best"),
    (["--keep", "best", "--copies", "0"], "--copies 0: expected a count >= 1, above 1 only with --keep best"),
    (["--sft-steps", "600"], "--sft-steps 600: expected a count >= 1, other than 300 only with --keep"),
])
def test_the_distill_study_refuses_a_recipe_flag_it_cannot_honour(tmp_path, flags, message):
    """Checked before anything is read or played: --out stays empty."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "distill_at_scale.py"
    done = subprocess.run([sys.executable, str(script), "--train", str(tmp_path / "t"), "--tasks", str(tmp_path / "e"),
                           "--out", str(tmp_path / "out"), "--rows", "uniform", *flags], capture_output=True, text=True)
    assert done.returncode != 0 and done.stderr.strip().splitlines()[-1] == message
    assert not (tmp_path / "out").exists()
