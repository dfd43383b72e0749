"""Stage-1 Q-targets (AgentPRM, arXiv 2502.10325): Monte-Carlo estimates of Q^π(s, a) from rollouts of π.

Q-target, for G(s, a) the visits to the prefix (same task, same history, same action) across all rollouts:

    Q̂(s,a) = 1/|G(s,a)| · Σ_{(s_t,a_t) ∈ G(s,a)} Σ_{k=t}^{T-1} γ^(k−t) r_k

The discount counts from the visit's own turn t to the end of its episode. Branch episodes (rollout/branch.py)
count from their branch turn on. The paper's reference code applies
γ^t from the episode start instead, which shrinks the targets of late states for no reason; we do not.

Linear in the number of steps: state keys are chained incrementally along each episode (as `AgentState.key()`
does, one sha256 per step), returns-to-go are accumulated backwards (G_t = r_t + γ G_{t+1}, vectorised across
episodes), and the (state, action) groups are averaged by a pyarrow group-by. Only the columns needed are read.

Targets file (Parquet, one row per unique (state, action), in order of first visit):

    column      type     meaning
    state_key   string   AgentState.key() of the state (sha256 of task id, task and the whole history)
    action      string   the agent's reply as written
    q           float64  Q̂(s, a) in [0, 1] for ALFWorld rewards
    visits      int32    |G(s, a)|
    task_id     string   the game
    task_type   string
    episode_id  string   first visit: the episode ...
    turn        int32    ... and the turn whose state is s (rebuild it with `agentprm.agent.replay.episode_states`)

Schema metadata `agentprm` (JSON): kind "mc-targets", the rollouts path (absolute), gamma, and episode counts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from hashlib import sha256
from json.encoder import encode_basestring_ascii as _json_str
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentprm.agent.format import parse_reply
from agentprm.data.trajectories import SCHEMA, SORT_KEYS, shard_files
from agentprm.errors import UserError
from agentprm.io import atomic_path

META_KEY = b"agentprm"
TARGETS_SCHEMA = pa.schema([
    ("state_key", pa.string()),
    ("action", pa.string()),
    ("q", pa.float64()),
    ("visits", pa.int32()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
    ("episode_id", pa.string()),
    ("turn", pa.int32()),
])
ROLLOUT_COLUMNS = ("episode_id", "task_id", "task_type", "turn", "task", "observation", "action", "reward", "error")
ROLLOUT_SCHEMA = pa.schema([SCHEMA.field(name) for name in ROLLOUT_COLUMNS])


@dataclass
class TargetsFile:
    table: pa.Table
    info: dict[str, Any]  # the file's `agentprm` metadata
    path: Path


def _codes(column: pa.ChunkedArray) -> tuple[list[int], list[str]]:
    """Per-row indices into the column's distinct values, so per-value work (escaping, parsing) is done once."""
    encoded = column.combine_chunks().dictionary_encode()
    return encoded.indices.to_numpy(zero_copy_only=False).tolist(), encoded.dictionary.to_pylist()


def state_keys(table: pa.Table) -> list[str]:
    """`AgentState.key()` of the state before every row, for rows sorted by (episode_id, turn) with turns 0..n-1:
    the chain of `AgentState.start`/`advance` (the history holds parsed commands) without replaying the agent's
    memory. `state._chain` is inlined byte for byte (json.dumps of three strings: "[a, b, c]", each JSON-escaped
    with ensure_ascii; a hex key needs only quotes): this is the hot loop, and json.dumps' per-call overhead would
    dominate it."""
    obs_index, obs_values = _codes(table["observation"])
    obs_json = [_json_str(o) for o in obs_values]
    reply_index, reply_values = _codes(table["action"])
    command_json = [_json_str(parse_reply(r)[1]) for r in reply_values]
    firsts = table.filter(pc.equal(table["turn"], 0))
    heads = iter([f"[{_json_str(task_id)}, {_json_str(task)}, "
                  for task_id, task in zip(firsts["task_id"].to_pylist(), firsts["task"].to_pylist())])
    keys: list[str] = []
    key, command = "", ""
    for turn, o, r in zip(table["turn"].to_pylist(), obs_index, reply_index):
        text = f"{next(heads)}{obs_json[o]}]" if turn == 0 else f'["{key}", {command}, {obs_json[o]}]'
        key = sha256(text.encode()).hexdigest()
        keys.append(key)
        command = command_json[r]
    return keys


def returns_to_go(turns: np.ndarray, rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Σ_{k≥t} γ^(k−t) r_k for every row, for rows sorted by (episode_id, turn) with turns 0..n-1. Backwards in
    turn order, vectorised across episodes: G_t = r_t + γ G_{t+1}, every row of turn t at once."""
    g = rewards.astype(np.float64)
    has_next = np.zeros(len(turns), dtype=bool)
    has_next[:-1] = turns[1:] == turns[:-1] + 1  # the next row continues the same episode
    order = np.argsort(turns, kind="stable")
    bounds = np.searchsorted(turns[order], np.arange(turns.max(initial=0) + 2))
    for t in range(len(bounds) - 2, -1, -1):
        rows = order[bounds[t]:bounds[t + 1]]
        rows = rows[has_next[rows]]
        g[rows] += gamma * g[rows + 1]
    return g


def drop_failed_episodes(table: pa.Table) -> pa.Table:
    """Episodes whose env failed have no meaningful return; a writer may mark only their last row."""
    failed = pc.unique(pc.filter(table["episode_id"], pc.not_equal(table["error"], "")))
    return table.filter(pc.invert(pc.is_in(table["episode_id"], value_set=failed))) if len(failed) else table


def counted_rows(table: pa.Table) -> np.ndarray | None:
    """Rows Q̂ averages over: a branch episode (agentprm/rollout/branch.py) only from its branch turn on, since its
    earlier rows are a replayed prefix followed by a forced action. None when every row counts."""
    from agentprm.rollout.branch import first_target_turn

    ids, values = _codes(table["episode_id"])
    first = np.array([first_target_turn(v) for v in values], dtype=np.int64)
    if not first.any():
        return None
    return table["turn"].to_numpy() >= first[np.asarray(ids, dtype=np.int64)]


def mc_targets(table: pa.Table, gamma: float) -> pa.Table:
    """Q̂ (see the module doc) for a trajectory table sorted by (episode_id, turn) with every episode's turns
    0..n-1 (as `read_rollout_columns` returns it), failed episodes dropped."""
    if not 0.0 <= gamma <= 1.0:
        raise UserError(f"--gamma {gamma}: must be in [0, 1]")
    keys = state_keys(table)
    g = returns_to_go(table["turn"].to_numpy(), table["reward"].to_numpy(), gamma)
    visits = pa.table({"state_key": keys, "reply": _codes(table["action"])[0], "g": g,
                       "row": np.arange(len(keys), dtype=np.int64)})
    counted = counted_rows(table)
    if counted is not None:
        visits = visits.filter(counted)
    groups = visits.group_by(["state_key", "reply"], use_threads=False).aggregate(
        [("g", "mean"), ("g", "count"), ("row", "min")]).sort_by("row_min")
    refs = table.select(["action", "task_id", "task_type", "episode_id", "turn"]).take(groups["row_min"])
    return pa.table({
        "state_key": groups["state_key"],
        "q": groups["g_mean"],
        "visits": pc.cast(groups["g_count"], pa.int32()),
        **{name: refs[name] for name in refs.column_names},
    }).select(TARGETS_SCHEMA.names)


def read_rollout_columns(path: str | Path) -> pa.Table:
    """The columns Q-targets need from a trajectory file or folder, sorted by (episode_id, turn); the admissible
    lists, the bulk of real rollouts, are never read."""
    tables = []
    for shard in shard_files(path):
        try:
            names = set(pq.read_schema(shard).names)
            table = pq.read_table(shard, columns=[c for c in ROLLOUT_COLUMNS if c in names])
        except (pa.ArrowException, OSError) as e:
            raise UserError(f"{shard}: not a readable Parquet file ({e})") from None
        tables.append(conform(table, ROLLOUT_SCHEMA, shard, "trajectory"))
    table = pa.concat_tables(tables).sort_by(SORT_KEYS)
    check_turns(table, path)
    return table


def check_turns(table: pa.Table, path: str | Path) -> None:
    """Every episode's turns run 0..n-1 (a shard read twice would otherwise count its visits twice)."""
    episodes = np.asarray(_codes(table["episode_id"])[0])
    turns = table["turn"].to_numpy()
    row = np.arange(len(turns))
    starts = np.ones(len(turns), dtype=bool)
    starts[1:] = episodes[1:] != episodes[:-1]
    expected = row - np.maximum.accumulate(np.where(starts, row, 0))
    bad = np.flatnonzero(turns != expected)
    if len(bad):
        episode = table["episode_id"][int(bad[0])].as_py()
        raise UserError(f"{path}: episode {episode!r} has turn {turns[bad[0]]} where {expected[bad[0]]} was expected "
                        "(rows duplicated or missing, e.g. the same shard read twice)")


def targets_from_rollouts(rollouts: str | Path, gamma: float) -> TargetsFile:
    """Read a trajectory file or folder and estimate Q̂; `info` records where the targets came from."""
    table = read_rollout_columns(rollouts)
    kept = drop_failed_episodes(table)
    targets = mc_targets(kept, gamma)
    episodes, kept_episodes = len(pc.unique(table["episode_id"])), len(pc.unique(kept["episode_id"]))
    info = {"kind": "mc-targets", "rollouts": str(Path(rollouts).resolve()), "gamma": gamma,
            "episodes": kept_episodes, "failed_episodes_dropped": episodes - kept_episodes, "steps": kept.num_rows}
    return TargetsFile(targets, info, Path(rollouts))


def write_with_info(path: str | Path, table: pa.Table, info: dict[str, Any]) -> Path:
    """A Parquet file written atomically, `info` stored as JSON under the schema metadata key `agentprm`."""
    path = Path(path)
    if path.suffix != ".parquet":
        raise UserError(f"--out {path}: expected a .parquet file name")
    table = table.replace_schema_metadata({META_KEY: json.dumps(info).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def conform(table: pa.Table, schema: pa.Schema, path: Path, what: str) -> pa.Table:
    """`table` with exactly `schema`'s columns, cast to its types; a missing or uncastable column is a UserError."""
    for field in schema:
        if field.name not in table.column_names:
            raise UserError(f"{path}: missing column '{field.name}' (not a {what} file?)")
        if table.schema.field(field.name).type != field.type:
            try:
                column = table[field.name].cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise UserError(f"{path}: column '{field.name}' has type {table.schema.field(field.name).type}, "
                                f"expected {field.type}") from None
            table = table.set_column(table.column_names.index(field.name), field.name, column)
    return table.select(schema.names)


def read_checked(path: str | Path, schema: pa.Schema, what: str) -> TargetsFile:
    """A Parquet file with `schema`'s columns (cast to its types) and its `agentprm` metadata; one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such {what} file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({e})") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        info = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        raise UserError(f"{path}: bad '{META_KEY.decode()}' metadata (not JSON)") from None
    return TargetsFile(conform(table, schema, path, what), info, path)


def read_targets(path: str | Path) -> TargetsFile:
    return read_checked(path, TARGETS_SCHEMA, "Q-targets")
