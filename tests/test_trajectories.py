import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentprm.data.trajectories import (SCHEMA, EpisodeRecord, ShardWriter, StepRecord, iter_episodes,
                                        read_trajectories)
from agentprm.envs.base import Turn
from agentprm.errors import UserError


def write_episodes(out_dir, episodes) -> None:
    with ShardWriter(out_dir) as writer:
        for e in episodes:
            writer.add(e)


def episode(eid: str, n: int, won: bool = True, error: str = "") -> EpisodeRecord:
    steps = [StepRecord(turn=t, observation=f"obs {t}", admissible=("look", f"go to shelf {t}"), action="look",
                        reward=float(won and t == n - 1), done=t == n - 1, won=won and t == n - 1,
                        admissible_action=True) for t in range(n)]
    return EpisodeRecord(episode_id=eid, task_id=f"task-{eid}", task_type="pick_and_place_simple",
                         task="put some apple on fridge.", policy="random", seed=7, steps=steps, error=error)


def test_round_trip_across_shards_in_order(tmp_path):
    episodes = [episode(f"ep{i}", n) for i, n in enumerate([3, 1, 4, 2])]
    with ShardWriter(tmp_path, rows_per_shard=4) as writer:
        for ep in reversed(episodes):  # written out of order: reading sorts
            writer.add(ep)
    assert [p.name for p in writer.paths] == ["part-00000.parquet", "part-00001.parquet"]
    table = read_trajectories(tmp_path)
    assert table.schema.equals(SCHEMA)
    assert table.num_rows == 10
    assert list(iter_episodes(table)) == episodes
    assert list(iter_episodes(read_trajectories(writer.paths[0]))) == [episodes[2], episodes[3]]


def test_failed_episode_without_steps_keeps_its_error(tmp_path):
    write_episodes(tmp_path, [episode("ok", 2), episode("crashed", 0, error="worker exited with code 1")])
    table = read_trajectories(tmp_path)
    (crashed,) = [ep for ep in iter_episodes(table) if ep.error]
    assert crashed.episode_id == "crashed" and len(crashed.steps) == 1 and crashed.steps[0].done
    assert not crashed.won
    with pytest.raises(ValueError):
        episode("empty", 0).rows()


def test_write_rows_with_the_error_on_the_last_row_only(tmp_path):
    rows = episode("w", 2).rows()
    rows[-1]["error"] = "worker killed by signal SIGKILL"
    with ShardWriter(tmp_path) as writer:
        writer.write_rows(rows)
        with pytest.raises(ValueError, match="'won'"):
            writer.write_rows([{k: v for k, v in rows[0].items() if k != "won"}])
    (read,) = iter_episodes(read_trajectories(tmp_path))
    assert read.error == "worker killed by signal SIGKILL" and len(read.steps) == 2


def test_new_writer_continues_numbering(tmp_path):
    write_episodes(tmp_path, [episode("a", 1)])
    write_episodes(tmp_path, [episode("b", 1)])
    assert sorted(os.listdir(tmp_path)) == ["part-00000.parquet", "part-00001.parquet"]
    assert [ep.episode_id for ep in iter_episodes(read_trajectories(tmp_path))] == ["a", "b"]


def test_crash_loses_only_unflushed_rows_and_leaves_no_temp_files(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path, rows_per_shard=2) as writer:
            writer.add(episode("a", 2))  # flushed: full shard
            writer.add(episode("b", 1))
            raise RuntimeError("rollout crashed")
    assert sorted(os.listdir(tmp_path)) == ["part-00000.parquet", "part-00001.parquet"]


def test_step_record_from_turns():
    seen = Turn(task="t", observation="you see a shelf", admissible=("look", "go to shelf 1"))
    result = Turn(task="t", observation="Nothing happens.", admissible=("look",), info={"admissible_action": False})
    step = StepRecord.from_turns(3, seen, "dance", result)
    assert step == StepRecord(turn=3, observation="you see a shelf", admissible=("look", "go to shelf 1"),
                              action="dance", admissible_action=False)


def test_duplicate_rows_are_reported(tmp_path):
    write_episodes(tmp_path / "a", [episode("x", 2)])
    table = pa.concat_tables([read_trajectories(tmp_path / "a")] * 2)
    with pytest.raises(UserError, match="'x'"):
        list(iter_episodes(table))


def test_bad_files_are_user_errors_naming_file_and_column(tmp_path):
    text = tmp_path / "notes.parquet"
    text.write_text("not parquet")
    with pytest.raises(UserError, match="notes.parquet"):
        read_trajectories(text)
    partial = tmp_path / "partial.parquet"
    pq.write_table(pa.Table.from_pylist(episode("a", 1).rows(), schema=SCHEMA).drop_columns(["won"]), partial)
    with pytest.raises(UserError, match=r"partial.parquet: missing column 'won'"):
        read_trajectories(partial)
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({**{c.name: [None] for c in SCHEMA}, "turn": ["first"]}), wrong)
    with pytest.raises(UserError, match=r"wrong.parquet: column 'turn'"):
        read_trajectories(wrong)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty: no .parquet"):
        read_trajectories(tmp_path / "empty")
    with pytest.raises(UserError, match="missing: no such"):
        read_trajectories(tmp_path / "missing")


def test_readable_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    write_episodes(tmp_path / "traj", [episode("a", 2), episode("b", 3, won=False)])
    files = sorted(str(p) for p in (tmp_path / "traj").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == 5
    assert ds[0]["admissible"] == ["look", "go to shelf 0"]
    assert sum(ds["won"]) == 1


def test_nan_or_infinite_numbers_are_refused_naming_file_column_and_row(tmp_path):
    """a NaN reward (or Q̂) went through to the losses and trained the PRM into NaN silently."""
    from agentprm.data.tables import TARGETS_SCHEMA, read_targets

    rows = episode("a", 3).rows()
    rows[1]["reward"] = float("nan")
    bad = tmp_path / "nan.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), bad)
    with pytest.raises(UserError, match=r"nan.parquet: column 'reward' holds nan at row 1; values must be finite"):
        read_trajectories(bad)
    targets = tmp_path / "targets.parquet"
    row = {"state_key": "s", "action": "look", "q": 0.5, "visits": 1, "task_id": "t", "task_type": "pick_and_place_simple",
           "episode_id": "e", "turn": 0}
    table = pa.Table.from_pylist([row, {**row, "q": float("inf")}], schema=TARGETS_SCHEMA)
    pq.write_table(table, targets)
    with pytest.raises(UserError, match=r"targets.parquet: column 'q' holds inf at row 1"):
        read_targets(targets)


@pytest.mark.parametrize("column, value, message", [
    ("reward", 1000.0, "values must be in [0, 1]"), ("reward", -5.0, "values must be in [0, 1]"),
    ("turn", -1, "values must be >= 0"), ("origin", "teleport", "values must be one of ''"),
])
def test_trajectory_values_out_of_range_are_refused(tmp_path, column, value, message):
    """rewards of 1000 or −5 and unknown origins were read as given."""
    rows = episode("a", 3).rows()
    rows[2][column] = value
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), bad)
    with pytest.raises(UserError, match=rf"bad.parquet: column '{column}' holds {value!r} at row 2; " + re.escape(message)):
        read_trajectories(bad)


@pytest.mark.parametrize("column", ["observation", "admissible"])
def test_a_text_too_long_to_be_a_turn_is_refused_before_work(tmp_path, column, capsys):
    """A 1 MB observation in a demos file kept `sft` busy past 240 s: any text of a trajectory (and of every table
    agentprm reads) is at most MAX_TEXT characters, refused with one short line naming file, column and row."""
    from agentprm.cli import main
    from agentprm.data.tables import MAX_TEXT

    rows = episode("a", 3).rows()
    big = "x " * 500_000
    rows[1][column] = (big, "look") if column == "admissible" else big
    bad = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), bad)
    with pytest.raises(UserError, match=rf"big.parquet: column '{column}' holds .* at row 1; .*at most {MAX_TEXT:,}"):
        read_trajectories(bad)
    assert main(["sft", "--demos", str(bad), "--out", str(tmp_path / "pol"), "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and len(err) < 500 and not (tmp_path / "pol").exists()
    rows[1][column] = (("x" * MAX_TEXT), "look") if column == "admissible" else "x" * MAX_TEXT   # the limit itself
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), bad)
    assert read_trajectories(bad).num_rows == 3


def test_q_targets_out_of_range_are_refused(tmp_path):
    from agentprm.data.tables import TARGETS_SCHEMA, read_targets

    table = pa.Table.from_pylist([{"state_key": "s", "action": "a", "q": q, "visits": 1, "task_id": "t",
                                   "task_type": "x", "episode_id": "e", "turn": 0} for q in (0.5, 7.0)],
                                 schema=TARGETS_SCHEMA)
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(UserError, match=r"t.parquet: column 'q' holds 7.0 at row 1; values must be in \[0, 1\]"):
        read_targets(tmp_path / "t.parquet")


def test_shards_whose_columns_disagree_are_named(tmp_path):
    """two shards of one folder with an extra column of different types were a pyarrow traceback."""
    for k, value in enumerate([1, "x"]):
        rows = episode(f"e{k}", 2).rows()
        table = pa.Table.from_pylist(rows, schema=SCHEMA).append_column("extra", pa.array([value] * len(rows)))
        pq.write_table(table, tmp_path / f"part-{k:05d}.parquet")
    with pytest.raises(UserError, match=r"part-00001.parquet: column 'extra' has type string where part-00000.parquet "
                                        r"has int64"):
        read_trajectories(tmp_path)


def test_shards_from_before_the_candidate_columns_read_with_them_empty(tmp_path):
    """Shards written before episodes kept what the agent weighed (no candidate columns) still read, as steps that
    weighed nothing; a mixed folder reads as one."""
    old = pa.Table.from_pylist(episode("a", 2).rows(), schema=SCHEMA).drop_columns(["candidates", "candidate_scores"])
    (tmp_path / "traj").mkdir()
    pq.write_table(old, tmp_path / "traj" / "part-00000.parquet")
    weighed = episode("b", 1)
    weighed.steps[0] = StepRecord(**{**weighed.steps[0].__dict__, "candidates": ("look", "go to shelf 0"),
                                     "candidate_scores": (0.25, 0.75)})
    with ShardWriter(tmp_path / "traj") as writer:
        writer.add(weighed)
    a, b = iter_episodes(read_trajectories(tmp_path / "traj"))
    assert [(s.candidates, s.candidate_scores) for s in a.steps] == [((), ())] * 2
    assert b.steps == weighed.steps
