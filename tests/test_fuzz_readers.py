"""Fuzz the readers of every file the project reads: whatever is in the file, the reader returns a correct
value or raises a one-line `UserError` naming the file — never a traceback. Bounded for CI (max_examples)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentprm.errors import UserError

FUZZ = settings(max_examples=int(os.environ.get("AGENTPRM_FUZZ_EXAMPLES", 60)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=8)


# ---------------------------------------------------------------- loop configs (YAML)
def _section_names():
    from agentprm.loop.config import LoopConfig

    import dataclasses
    return {f.name: [g.name for g in dataclasses.fields(f.default_factory())] if f.default_factory is not
            dataclasses.MISSING else [] for f in dataclasses.fields(LoopConfig)}


SECTIONS = _section_names()
config_docs = st.dictionaries(
    st.sampled_from(sorted(SECTIONS) + ["bogus"]),
    st.one_of(values, st.builds(lambda sec, vals: dict(zip(SECTIONS.get(sec, ["x"]), vals)),
                                st.sampled_from(sorted(SECTIONS)), st.lists(values, max_size=4))),
    max_size=5)


@FUZZ
@given(doc=config_docs)
def test_loop_configs(tmp_path, doc):
    from agentprm.loop.config import LoopConfig, load_config

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        cfg = load_config(path)
    except UserError as e:
        assert "\n" not in str(e).strip() and str(path) in str(e)
        return
    assert isinstance(cfg, LoopConfig)


@FUZZ
@given(raw=st.one_of(st.text(max_size=200).map(str.encode), st.binary(max_size=200)))
def test_loop_config_bytes(tmp_path, raw):
    from agentprm.loop.config import load_config

    path = tmp_path / "c.yaml"
    path.write_bytes(raw)
    try:
        load_config(path)
    except UserError as e:
        assert "\n" not in str(e).strip()


# ---------------------------------------------------------------- tasks.jsonl
manifest_rows = st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["task_id", "task_type", "game", "split", "floorplan", "extra"]), values,
                    max_size=6),
    st.fixed_dictionaries({"task_id": st.text(max_size=8), "task_type": st.just("pick_and_place_simple"),
                           "game": st.one_of(st.just("g0"), st.text(max_size=8), scalars)}),
    st.text(max_size=30)), max_size=5)


@FUZZ
@given(rows=manifest_rows, tail=st.one_of(st.just(b""), st.binary(max_size=8)))
def test_task_manifests(tmp_path, rows, tail):
    from agentprm.envs.alfworld.tasks import MANIFEST, load_tasks
    from agentprm.envs.base import TaskSpec

    folder = tmp_path / "tasks"
    (folder / "g0").mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    (folder / MANIFEST).write_bytes("\n".join(line.replace("\n", " ") for line in lines).encode() + tail)
    try:
        tasks = load_tasks(folder)
    except UserError as e:
        assert "\n" not in str(e).strip()
        return
    assert tasks and all(isinstance(t, TaskSpec) and Path(t.game).is_dir() for t in tasks)


# ---------------------------------------------------------------- Parquet files: trajectories, targets
column_values = st.one_of(st.lists(st.integers(-5, 5), min_size=1, max_size=3),
                          st.lists(st.text(max_size=5), min_size=1, max_size=3),
                          st.lists(st.floats(allow_nan=True), min_size=1, max_size=3),
                          st.lists(st.booleans(), min_size=1, max_size=3))


def _tables(names):
    return st.dictionaries(st.sampled_from(names + ["junk"]), column_values, min_size=1, max_size=len(names) + 1)


def _write_table(path: Path, columns: dict) -> None:
    n = min(len(v) for v in columns.values())
    pq.write_table(pa.table({k: v[:n] for k, v in columns.items()}), path)


def _read_trajectories(path: Path) -> None:
    from agentprm.data.trajectories import iter_episodes, read_trajectories

    assert all(e.steps for e in iter_episodes(read_trajectories(path)))


def _read_targets(path: Path) -> None:
    from agentprm.data.tables import TARGETS_SCHEMA, read_targets

    assert read_targets(path).table.schema.names[:len(TARGETS_SCHEMA.names)] == TARGETS_SCHEMA.names


def _schema(name: str) -> list[str]:
    from agentprm.data.tables import TARGETS_SCHEMA
    from agentprm.data.trajectories import SCHEMA

    return list({"trajectories": SCHEMA, "targets": TARGETS_SCHEMA}[name].names)


@pytest.mark.parametrize("kind, read", [("trajectories", _read_trajectories), ("targets", _read_targets)])
@FUZZ
@given(data=st.data())
def test_parquet_files(tmp_path, data, kind, read):
    path = tmp_path / f"{kind}.parquet"
    if data.draw(st.booleans()):
        path.write_bytes(data.draw(st.binary(max_size=64)))
    else:
        _write_table(path, data.draw(_tables(_schema(kind))))
    try:
        read(path)
    except UserError as e:
        assert "\n" not in str(e).strip() and str(path) in str(e)


# ---------------------------------------------------------------- model folders' agentprm.json
@FUZZ
@given(meta=st.one_of(values, st.text(max_size=40)))
def test_model_folder_json(tmp_path, meta):
    from agentprm.agent.encoding import PromptConfig
    from agentprm.prm.model import ProcessRewardModel

    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "agentprm.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    for read in (PromptConfig.load, ProcessRewardModel.load):
        try:
            out = read(folder)
        except UserError as e:
            assert "\n" not in str(e).strip()
            continue
        assert read == PromptConfig.load and isinstance(out, PromptConfig)
