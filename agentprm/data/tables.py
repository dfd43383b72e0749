"""Parquet files the stages pass on (besides the trajectories of data/trajectories.py): their schemas, and one way
to write and read any of them — atomically, with the producing stage's metadata as JSON under the schema metadata
key `agentprm`, and with one-line errors naming the file and the column on read.

Q-targets (targets/mc.py, targets/continuation.py; one row per unique (state, action), in order of first visit):

    column      type     meaning
    state_key   string   AgentState.key() of the state (sha256 of task id, task and the whole history)
    action      string   the agent's reply as written
    q           float64  Q̂(s, a) in [0, 1] for ALFWorld rewards
    visits      int32    |G(s, a)|: rollout visits averaged over (continuation targets: 1)
    task_id     string   the game
    task_type   string
    episode_id  string   first visit: the episode ...
    turn        int32    ... and the turn whose state is s (rebuild it with `agentprm.agent.replay.episode_states`)

Preference pairs (targets/pairs.py; one row per ordered pair, grouped by state in order of first visit):

    column       type     meaning
    state_key    string   the shared state (AgentState.key())
    chosen       string   the reply with the higher Q̂
    rejected     string   the reply with the lower Q̂
    q_chosen     float64
    q_rejected   float64  q_chosen − q_rejected > δ
    task_id      string
    task_type    string
    episode_id   string   a visit to the state: the episode ...
    turn         int32    ... and turn

Eval outcomes (loop/sweep.py; one row per (eval row, game) of a finished run — what a study commits, so that its
tables and CIs can be recomputed without the run folders):

    column      type     meaning
    policy      string   the results row: "pi0", "pi5", "pi5-BoN4", …
    iteration   int32    the iteration whose policy played
    best_of_n   int32    samples per turn (1: greedy)
    search      string   "" or the search ("beam2x2")
    env_steps   int64    train env steps the run had taken when that policy was trained (its learning curve)
    task_id     string   the eval game
    wins        int32    episodes won on it …
    episodes    int32    … of episodes played (≥ 1)

Metadata `agentprm` (JSON): targets — kind ("mc-targets", "continuation-targets"), the rollouts path (absolute),
gamma, episode counts; pairs — the targets' metadata plus kind "pairs", the targets path and delta; outcomes — kind
"eval-outcomes", variant, seed, the run's config and provenance.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
PAIRS_SCHEMA = pa.schema([
    ("state_key", pa.string()),
    ("chosen", pa.string()),
    ("rejected", pa.string()),
    ("q_chosen", pa.float64()),
    ("q_rejected", pa.float64()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
    ("episode_id", pa.string()),
    ("turn", pa.int32()),
])


OUTCOMES_SCHEMA = pa.schema([
    ("policy", pa.string()),
    ("iteration", pa.int32()),
    ("best_of_n", pa.int32()),
    ("search", pa.string()),
    ("env_steps", pa.int64()),
    ("task_id", pa.string()),
    ("wins", pa.int32()),
    ("episodes", pa.int32()),
])


@dataclass
class TableFile:
    """A Parquet file read with its schema checked: the table, its `agentprm` metadata, where it came from."""
    table: pa.Table
    info: dict[str, Any]  # the file's `agentprm` metadata
    path: Path


def write_with_info(path: str | Path, table: pa.Table, info: dict[str, Any]) -> Path:
    """A Parquet file written atomically, `info` stored as JSON under the schema metadata key `agentprm`."""
    path = Path(path)
    if path.suffix != ".parquet":
        raise UserError(f"--out {path}: expected a .parquet file name")
    table = table.replace_schema_metadata({META_KEY: json.dumps(info).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


VALUE_RANGES = {   # column -> (low, high or None), both included: ALFWorld's reward is 1 at the winning step, else
    "reward": (0, 1),        # 0, so every discounted return, Q̂ and shaped target lies in [0, 1]
    "q": (0, 1), "q_chosen": (0, 1), "q_rejected": (0, 1),
    "turn": (0, None), "origin_turn": (0, None), "visits": (1, None),
    "iteration": (0, None), "best_of_n": (1, None), "env_steps": (0, None), "wins": (0, None), "episodes": (1, None),
}
ENUMS = {"origin": ("", "reset", "branch")}   # column -> its values (data/trajectories.py documents them)


MAX_TEXT = 2**16   # characters of any one text of a table (an observation, a command, a task): a turn, not a book


def check_values(table: pa.Table, schema: pa.Schema, path: Path) -> None:
    """Every column of `schema` holds a value in every row (a null action or episode id crashed the readers or was
    learned as text), every floating-point column holds finite numbers (a NaN reward or Q̂ would train a model into
    NaN without a word), and every column with a range or an enumeration above stays in it (a reward of 1000 or a Q̂
    of 7 would be learned as given): a one-line error naming the column, the row and the value."""
    def refuse(name: str, bad, why: str) -> None:
        if pc.any(bad).as_py():   # (None for an empty table: nothing to refuse)
            row = pc.index(bad, True).as_py()
            raise UserError(f"{path}: column '{name}' holds {repr(table[name][row].as_py())[:80]} at row {row}; {why}")

    too_long = f"a text may be at most {MAX_TEXT:,} characters (a longer one would stall the tokenizer and the model " \
               "for minutes)"
    for field in schema:
        if field.name not in table.column_names:
            continue
        column = table[field.name]
        refuse(field.name, column.is_null(), "no value may be missing (null)")
        if pa.types.is_floating(field.type):
            refuse(field.name, pc.invert(pc.is_finite(column)).fill_null(False), "values must be finite numbers")
        if field.name in VALUE_RANGES:
            low, high = VALUE_RANGES[field.name]
            bad = pc.less(column, low) if high is None else pc.or_(pc.less(column, low), pc.greater(column, high))
            refuse(field.name, bad.fill_null(False), f"values must be {'>= ' if high is None else 'in ['}{low}"
                   + ("" if high is None else f", {high}]"))
        if field.name in ENUMS:
            refuse(field.name, pc.invert(pc.is_in(column, value_set=pa.array(ENUMS[field.name]))).fill_null(False),
                   f"values must be one of {', '.join(map(repr, ENUMS[field.name]))}")
        if pa.types.is_string(field.type):
            refuse(field.name, pc.greater(pc.utf8_length(column), MAX_TEXT).fill_null(False), too_long)
        if pa.types.is_list(field.type) and len(column):   # a list's items: none missing, numbers finite, texts short
            lists = column.combine_chunks()
            items, rows = pc.list_flatten(lists), pc.list_parent_indices(lists)
            bad, why = items.is_null(), "no item of a list may be missing (null) or a non-finite number"
            if pa.types.is_floating(field.type.value_type):
                bad = pc.or_(bad, pc.invert(pc.is_finite(items)).fill_null(True))
            if pa.types.is_string(field.type.value_type) and not pc.any(bad).as_py():
                bad, why = pc.greater(pc.utf8_length(items), MAX_TEXT).fill_null(False), too_long
            if pc.any(bad).as_py():
                row = rows[pc.index(bad, True).as_py()].as_py()
                raise UserError(f"{path}: column '{field.name}' holds {repr(table[field.name][row].as_py())[:80]} at "
                                f"row {row}; {why}")


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
    check_values(table, schema, path)
    return table.select(schema.names)


def read_checked(path: str | Path, schema: pa.Schema, what: str) -> TableFile:
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
    if table.num_rows == 0:   # nothing to train on or pair: said here, not as a later crash or an empty output
        raise UserError(f"{path}: no rows (an empty {what} file)")
    return TableFile(conform(table, schema, path, what), info, path)


def read_targets(path: str | Path) -> TableFile:
    return read_checked(path, TARGETS_SCHEMA, "Q-targets")


def read_pairs(path: str | Path) -> TableFile:
    return read_checked(path, PAIRS_SCHEMA, "pairs")


def read_outcomes(path: str | Path) -> TableFile:
    file = read_checked(path, OUTCOMES_SCHEMA, "eval outcomes")
    if pc.any(pc.greater(file.table["wins"], file.table["episodes"])).as_py():
        raise UserError(f"{path}: column 'wins' exceeds 'episodes' in some row")
    return file
