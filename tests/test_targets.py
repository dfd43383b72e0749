"""Stage-1 Q-targets and pairs: convergence to exact Q^π on a hand-built MDP, γ counted from the turn, prefix
sharing, state keys equal to AgentState.key(), pairs respect δ, CLI round trip and one-line errors."""
import importlib.util
import json
import math
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentprm.agent.format import format_reply
from agentprm.agent.replay import episode_states
from agentprm.cli import main
from agentprm.data.tables import read_targets
from agentprm.data.tables import read_pairs
from agentprm.data.trajectories import SCHEMA, SORT_KEYS, EpisodeRecord, StepRecord, write_episodes_file
from agentprm.errors import UserError
from agentprm.targets.mc import drop_failed_episodes, mc_targets, returns_to_go, state_keys
from agentprm.targets.pairs import make_pairs, pairs_counts

START = "You are in the middle of a room. Looking quickly around you, you see a drawer 1, and a cabinet 1."


def episode(eid: str, steps: list[tuple[str, str, float]], task_id: str = "t0", error: str = "",
            origin: str = "", origin_turn: int = 0) -> EpisodeRecord:
    """steps: (observation seen, action, reward); the last step ends the episode, won iff its reward is 1."""
    records = [StepRecord(turn=t, observation=obs, admissible=(), action=act, reward=r, done=t == len(steps) - 1,
                          won=t == len(steps) - 1 and r == 1.0) for t, (obs, act, r) in enumerate(steps)]
    return EpisodeRecord(episode_id=eid, task_id=task_id, task_type="pick_and_place_simple",
                         task="put some apple on cabinet.", policy="synthetic", seed=0, steps=records, error=error,
                         origin=origin, origin_turn=origin_turn)


def as_table(episodes: list[EpisodeRecord]) -> pa.Table:
    return pa.Table.from_pylist([r for e in episodes for r in e.rows()], schema=SCHEMA).sort_by(SORT_KEYS)


def by_observation(targets: pa.Table, episodes: list[EpisodeRecord]) -> dict[tuple[str, str], tuple[float, int]]:
    """(observation of the state, action) -> (q, visits), through each target's (episode_id, turn) reference."""
    obs = {(e.episode_id, s.turn): s.observation for e in episodes for s in e.steps}
    return {(obs[(r["episode_id"], r["turn"])], r["action"]): (r["q"], r["visits"]) for r in targets.to_pylist()}


# A two-step MDP. s0: π picks "go to drawer 1" or "go to cabinet 1" with prob 1/2 each.
#   drawer -> s1 ("...apple 1") w.p. 0.7, else s2 ("...nothing"); reward 0.
#   cabinet -> episode ends, won w.p. 0.2.
#   s1: "take apple 1" (π 1/2) wins w.p. 0.9, "look" (π 1/2) wins w.p. 0.3.   s2: "look" wins w.p. 0.1.
S1, S2 = "On the drawer 1, you see a apple 1.", "On the drawer 1, you see nothing."
WIN = {(S1, "take apple 1"): 0.9, (S1, "look"): 0.3, (S2, "look"): 0.1}


def exact_q(gamma: float) -> dict[tuple[str, str], float]:
    v1, v2 = 0.5 * 0.9 + 0.5 * 0.3, 0.1
    return {(START, "go to drawer 1"): gamma * (0.7 * v1 + 0.3 * v2), (START, "go to cabinet 1"): 0.2, **WIN}


def sample_episodes(n: int, seed: int) -> list[EpisodeRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.5:
            out.append(episode(f"e{i:06d}", [(START, "go to cabinet 1", float(rng.random() < 0.2))]))
            continue
        s = S1 if rng.random() < 0.7 else S2
        a = rng.choice(["take apple 1", "look"]) if s == S1 else "look"
        out.append(episode(f"e{i:06d}", [(START, "go to drawer 1", 0.0), (s, a, float(rng.random() < WIN[(s, a)]))]))
    return out


def test_estimator_converges_to_exact_q():
    gamma, errors = 0.9, []
    for n in (100, 1000, 10000):
        episodes = sample_episodes(n, seed=n)
        got = by_observation(mc_targets(as_table(episodes), gamma), episodes)
        assert set(got) == set(exact_q(gamma))
        err = max(abs(got[k][0] - q) for k, q in exact_q(gamma).items())
        assert err < 4 / math.sqrt(n), (n, err)
        assert sum(v for (obs, _), (_, v) in got.items() if obs == START) == n
        errors.append(err)
    assert errors[-1] < errors[0]


def test_discount_counts_from_the_turn_not_the_episode_start():
    steps = [(START, "go to drawer 1", 0.0), (S1, "take apple 1", 0.0), ("You pick up the apple 1.", "look", 1.0)]
    targets = mc_targets(as_table([episode("e0", steps)]), gamma=0.5)
    assert targets["turn"].to_pylist() == [0, 1, 2]
    assert targets["q"].to_pylist() == [0.25, 0.5, 1.0]


def test_returns_to_go_with_dense_rewards_and_several_episodes():
    turns = np.array([0, 1, 2, 0, 0, 1], dtype=np.int32)
    rewards = np.array([1.0, 0.5, 0.25, 2.0, 0.0, 1.0], dtype=np.float32)
    expected = [1 + 0.9 * 0.5 + 0.81 * 0.25, 0.5 + 0.9 * 0.25, 0.25, 2.0, 0.9, 1.0]
    np.testing.assert_allclose(returns_to_go(rewards, 0.9, turns), expected, rtol=1e-12)
    np.testing.assert_array_equal(returns_to_go(rewards, 0.0, turns), rewards)


def test_shared_prefix_is_averaged_until_the_episodes_diverge():
    won = episode("a", [(START, "go to drawer 1", 0.0), (S1, "take apple 1", 0.0), (S1, "look", 1.0)])
    lost = episode("b", [(START, "go to drawer 1", 0.0), (S1, "take apple 1", 0.0), (S1, "inventory", 0.0)])
    other = episode("c", [(START, "go to drawer 1", 0.0), (S2, "take apple 1", 0.0)])  # diverges by observation
    rows = mc_targets(as_table([won, lost, other]), gamma=1.0).to_pylist()
    got = {(r["episode_id"], r["turn"], r["action"]): (r["q"], r["visits"]) for r in rows}
    assert got == {("a", 0, "go to drawer 1"): (pytest.approx(1 / 3), 3),
                   ("a", 1, "take apple 1"): (0.5, 2),      # same history in a and b
                   ("a", 2, "look"): (1.0, 1),               # same state, different actions: separate targets
                   ("b", 2, "inventory"): (0.0, 1),
                   ("c", 1, "take apple 1"): (0.0, 1)}       # same action, different history
    assert rows[1]["state_key"] != rows[4]["state_key"] and rows[2]["state_key"] == rows[3]["state_key"]


def test_state_keys_equal_agent_state_keys():
    replies = [format_reply("go to drawer 1", "the apple may be there"), "take apple 1 from drawer 1.", "look"]
    steps = [(START, replies[0], 0.0), (S1, replies[1], 0.0), ("You pick up the apple 1 from the drawer 1.",
                                                                 replies[2], 1.0)]
    odd = [(START + '\n"Quoted" café \\ ☕', "say \"hi\" ☕", 0.0), ("tab\there", "look", 1.0)]  # JSON escapes
    episodes = [episode("x", steps), episode("y", steps[:2], task_id="t1"), episode("z", odd, task_id="t-é")]
    expected = [state.key() for e in episodes for state, _ in episode_states(e)]
    assert state_keys(as_table(episodes)) == expected


def test_failed_episodes_are_dropped():
    ok = episode("a", [(START, "look", 1.0)])
    failed = episode("b", [(START, "look", 0.0), (S1, "look", 0.0)])
    table = as_table([ok, failed])
    marked_last_row_only = table.set_column(table.column_names.index("error"), "error",
                                            pa.array(["", "", "worker crashed"]))
    targets = mc_targets(drop_failed_episodes(marked_last_row_only), 1.0)
    assert targets.to_pylist()[0]["q"] == 1.0 and targets["visits"].to_pylist() == [1]


def test_the_same_shard_twice_is_an_error(tmp_path, capsys):
    episodes = sample_episodes(5, seed=0)
    for name in ("part-00000.parquet", "part-00001.parquet"):
        write_episodes_file(tmp_path / "rollouts" / name, episodes)
    assert main(["targets", "mc", "--rollouts", str(tmp_path / "rollouts"), "--out", str(tmp_path / "q.parquet")]) == 2
    assert "rows duplicated or missing" in capsys.readouterr().err


def test_pairs_respect_delta_and_stay_within_a_state():
    targets = pa.table({"state_key": ["s", "s", "s", "u"], "action": ["a", "b", "c", "d"], "q": [0.9, 0.5, 0.45, 0.0],
                        "visits": pa.array([3, 1, 2, 5], pa.int32()), "task_id": ["t"] * 4, "task_type": ["x"] * 4,
                        "episode_id": ["e"] * 4, "turn": pa.array([0] * 4, pa.int32())})
    pairs = make_pairs(targets, delta=0.1).to_pylist()
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [("a", "b"), ("a", "c")]
    assert all(p["q_chosen"] - p["q_rejected"] > 0.1 for p in pairs)
    assert len(make_pairs(targets, delta=0.0)) == 3
    # (a, c) is the one pair whose two Q̂ both average >= 2 visits; b's is a single return
    assert pairs_counts(make_pairs(targets, delta=0.0), targets) == {"pairs": 3, "states": 1, "games": 1,
                                                                     "averaged_pairs": 1}
    with pytest.raises(UserError, match="delta"):
        make_pairs(targets, delta=-1)


def test_cli_targets_and_pairs_round_trip(tmp_path, capsys):
    episodes = sample_episodes(200, seed=1)
    rollouts = write_episodes_file(tmp_path / "rollouts.parquet", episodes)
    out, pairs_out, summary = tmp_path / "q.parquet", tmp_path / "pairs.parquet", tmp_path / "s.json"
    assert main(["targets", "mc", "--rollouts", str(rollouts), "--gamma", "0.9", "--out", str(out),
                 "--json", str(summary)]) == 0
    targets = read_targets(out)
    assert targets.info["rollouts"] == str(rollouts.resolve()) and targets.info["gamma"] == 0.9
    assert targets.table.num_rows == 5 and json.loads(summary.read_text())["episodes"] == 200
    assert main(["targets", "pairs", "--targets", str(out), "--delta", "0.1", "--out", str(pairs_out)]) == 0
    pairs = read_pairs(pairs_out)
    assert pairs.info["delta"] == 0.1 and pairs.info["rollouts"] == str(rollouts.resolve())
    assert "2 pairs at 2 states of" in capsys.readouterr().out
    assert {(p["chosen"], p["rejected"]) for p in pairs.table.to_pylist()} == {
        ("go to drawer 1", "go to cabinet 1"), ("take apple 1", "look")}


def test_bad_targets_file_gives_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"state_key": ["s"], "action": ["a"]}), bad)
    with pytest.raises(UserError, match=r"bad\.parquet: missing column 'q'"):
        read_targets(bad)
    assert main(["targets", "pairs", "--targets", str(bad), "--out", str(tmp_path / "p.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "missing column 'q'" in err
    assert main(["targets", "mc", "--rollouts", str(tmp_path / "nope"), "--out", str(tmp_path / "q.parquet")]) == 2


def test_throughput_bench_agrees_with_the_naive_implementation(tmp_path):
    spec = importlib.util.spec_from_file_location("targets_throughput",
                                                  Path(__file__).parents[1] / "bench" / "targets_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--episodes", "60", "--tasks", "4", "--max-steps", "12", "--repeat", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["identical"] is True


def test_the_first_games_of_a_targets_file_are_the_targets_of_those_games_alone(tmp_path, capsys):
    """scripts/games_subset.py (rollouts per game at an equal budget): keeping whole games of a targets file gives
    the targets a rollout of those games alone gives — a state belongs to one game, so its Q̂ and visits are the
    same — and asking for more games than the file holds is refused before anything is written."""
    spec = importlib.util.spec_from_file_location("games_subset",
                                                  Path(__file__).parents[1] / "scripts" / "games_subset.py")
    subset = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(subset)
    games = {g: [episode(f"{g}-{e.episode_id}", [(s.observation, s.action, s.reward) for s in e.steps], task_id=g)
                 for e in sample_episodes(40, seed=i)] for i, g in enumerate(("g2", "g0", "g1"))}
    every = [e for eps in games.values() for e in eps]
    rollouts = write_episodes_file(tmp_path / "rollouts.parquet", every)
    full = tmp_path / "q.parquet"
    assert main(["targets", "mc", "--rollouts", str(rollouts), "--out", str(full)]) == 0
    out = tmp_path / "first2.parquet"
    subset.main(["--targets", str(full), "--games", "2", "--out", str(out)])
    assert "of 2 games" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="exists"):     # an existing file is never replaced
        subset.main(["--targets", str(full), "--games", "1", "--out", str(out)])
    with pytest.raises(SystemExit, match=r"nope\.parquet"):   # a missing targets file: its one line, nothing written
        subset.main(["--targets", str(tmp_path / "nope.parquet"), "--games", "1", "--out", str(tmp_path / "x.parquet")])
    assert not (tmp_path / "x.parquet").exists()
    kept = read_targets(out)
    alone = mc_targets(as_table(games["g0"] + games["g1"]), 0.9)
    as_dict = lambda t: {(r["state_key"], r["action"]): (round(r["q"], 12), r["visits"], r["task_id"])  # noqa: E731
                         for r in t.to_pylist()}
    assert as_dict(kept.table) == as_dict(alone) and {r[2] for r in as_dict(alone).values()} == {"g0", "g1"}
    assert kept.info["games"] == 2 and kept.info["gamma"] == 0.9
    assert read_targets(full).table.num_rows > kept.table.num_rows
    with pytest.raises(SystemExit, match="the targets hold 3 games"):
        subset.first_games(read_targets(full).table, 4)
