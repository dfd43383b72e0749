"""The trajectory store: Parquet shards, one row per turn (one agent action).

A row is what the agent saw, what it did and what came of it. Episode-level columns repeat on every row of
the episode, so any row can be read on its own (e.g. `table.filter(won)`), and `iter_episodes` rebuilds the
episodes. See docs/data.md for reading with pyarrow / pandas / `datasets`.

    column             type          meaning
    episode_id         string        unique per episode; rows of one episode share it
    task_id            string        the game (TaskSpec.task_id)
    task_type          string        one of agentprm.envs.alfworld.setup.TASK_TYPES
    turn               int32         0-based index of the action within the episode
    task               string        the goal sentence ("put some apple on fridge.")
    observation        string        what the agent saw before acting (turn 0: the env's first observation)
    admissible         list<string>  the admissible commands at that point
    action             string        the agent's reply as written (a bare command, or "REASON: … ACTION: …";
                                     the env received the parsed command)
    reward             float32       reward of this step (ALFWorld: 1 on the winning step, else 0)
    done               bool          the episode ended with this step (won, truncated or failed)
    won                bool          the task was completed by this step; an episode's outcome is its last row's
    policy             string        what chose the actions ("expert", "random", a model name, "human", ...)
    seed               int64         the seed the episode was played with
    admissible_action  bool          `action` was among `admissible`
    error              string        empty unless the episode failed (e.g. the env worker crashed): the reason;
                                     `ShardWriter.add` puts it on every row, `iter_episodes` also finds it
                                     when a writer put it on the failing (last) row only
    origin             string        how the episode began: "" from the task start, every action chosen by `policy`;
                                     "reset": its first `origin_turn` actions replayed from an expert demo, then
                                     `policy` (Reset-50-50, rollout/reset.py); "branch": its first `origin_turn`
                                     turns replayed from another episode, a different action forced at turn
                                     `origin_turn`, then `policy` (rollout/branch.py)
    origin_turn        int32         the turn where a reset or branch episode leaves its source; 0 for origin ""
    candidates         list<string>  the replies the agent weighed before `action` (Best-of-N: its N samples, each
                                     once); empty for an agent that acts without choosing among samples
    candidate_scores   list<float32> the critic's score of each of `candidates` (Best-of-N: Q_i, or the uniform
                                     control's); empty when they were not scored (all N samples agreed)

Shards written before the provenance columns existed are read with them derived from the episode ids (which
still end in "-reset<k>" / "-branch<k>" for those episodes, but nothing reads provenance from ids any more); shards
from before the candidate columns are read with them empty.

An episode that failed before its first action is stored as one row with turn 0, an empty action and the
error, so failures are never silently lost.

Shards are `<prefix>-00000.parquet`, `<prefix>-00001.parquet`, ... in one folder, each written to a temp file and
renamed into place: a crash never leaves a half-written shard and loses at most the rows not yet flushed.
An episode never spans two shards.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from agentprm.data.tables import META_KEY, check_values
from agentprm.envs.base import Turn
from agentprm.errors import UserError
from agentprm.io import atomic_path
from agentprm.outputs import OWNER_FILE

SCHEMA = pa.schema([
    ("episode_id", pa.string()),
    ("task_id", pa.string()),
    ("task_type", pa.string()),
    ("turn", pa.int32()),
    ("task", pa.string()),
    ("observation", pa.string()),
    ("admissible", pa.list_(pa.string())),
    ("action", pa.string()),
    ("reward", pa.float32()),
    ("done", pa.bool_()),
    ("won", pa.bool_()),
    ("policy", pa.string()),
    ("seed", pa.int64()),
    ("admissible_action", pa.bool_()),
    ("error", pa.string()),
    ("origin", pa.string()),
    ("origin_turn", pa.int32()),
    ("candidates", pa.list_(pa.string())),
    ("candidate_scores", pa.list_(pa.float32())),
])
EPISODE_COLUMNS = ("episode_id", "task_id", "task_type", "task", "policy", "seed", "error", "origin", "origin_turn")
ORIGINS = ("", "reset", "branch")
PROVENANCE = ("origin", "origin_turn")
STEP_COLUMNS = ("turn", "observation", "admissible", "action", "reward", "done", "won", "admissible_action",
                "candidates", "candidate_scores")
CANDIDATES = ("candidates", "candidate_scores")
SORT_KEYS = [("episode_id", "ascending"), ("turn", "ascending")]
DEFAULT_ROWS_PER_SHARD = 10_000


@dataclass(frozen=True)
class StepRecord:
    """One turn: the observation and admissible commands the agent saw, its action, and the outcome."""
    turn: int
    observation: str
    admissible: tuple[str, ...]
    action: str
    reward: float = 0.0
    done: bool = False
    won: bool = False
    admissible_action: bool = False
    candidates: tuple[str, ...] = ()           # what the agent weighed before `action` (Best-of-N's samples)
    candidate_scores: tuple[float, ...] = ()   # the critic's score of each (empty: not scored)

    @classmethod
    def from_turns(cls, turn: int, seen: Turn, action: str, result: Turn,
                   considered: tuple[tuple[str, ...], tuple[float, ...]] = ((), ())) -> StepRecord:
        """The record of acting `action` on `seen` (the Turn the agent saw), which led to `result`, after weighing
        `considered` = (candidates, their scores)."""
        admissible = result.info.get("admissible_action", action.strip() in seen.admissible)
        return cls(turn=turn, observation=seen.observation, admissible=tuple(seen.admissible), action=action,
                   reward=float(result.reward), done=bool(result.done), won=bool(result.won),
                   admissible_action=bool(admissible), candidates=tuple(considered[0]),
                   candidate_scores=tuple(considered[1]))


_NO_STEP = StepRecord(turn=0, observation="", admissible=(), action="", done=True)


@dataclass
class EpisodeRecord:
    episode_id: str
    task_id: str
    task_type: str
    task: str
    policy: str
    seed: int
    steps: list[StepRecord] = field(default_factory=list)
    error: str = ""
    origin: str = ""        # "" | "reset" | "branch" (see the module doc)
    origin_turn: int = 0

    def first_target_turn(self) -> int:
        """The first turn whose action Q-targets count: a branch's forced action on (its earlier turns replay
        another episode), every turn otherwise (a reset's expert prefix estimates the expert-then-π policy)."""
        return self.origin_turn if self.origin == "branch" else 0

    def policy_turns(self) -> range:
        """The turns whose action `policy` chose (a reset's expert prefix left out)."""
        return range(self.origin_turn if self.origin == "reset" else 0, len(self.steps))

    @property
    def won(self) -> bool:
        return bool(self.steps) and self.steps[-1].won

    def rows(self) -> list[dict[str, Any]]:
        if not self.steps and not self.error:
            raise ValueError(f"episode {self.episode_id!r} has no steps and no error: nothing to store")
        episode = {k: getattr(self, k) for k in EPISODE_COLUMNS}
        steps = self.steps or [_NO_STEP]
        return [{**episode, **{k: getattr(s, k) for k in STEP_COLUMNS}} for s in steps]


def shard_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index:05d}.parquet"


class ShardWriter:
    """Buffers whole episodes and writes them as numbered shards of about `rows_per_shard` rows.
    Numbering continues after shards already in `out_dir`, so a resumed run never overwrites earlier ones; the temp
    file of a shard whose write was killed is removed."""

    def __init__(self, out_dir: str | Path, prefix: str = "part", rows_per_shard: int = DEFAULT_ROWS_PER_SHARD):
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise UserError(f"{self.out_dir}: exists and is not a folder; shards need a folder (choose another path)")
        if self.out_dir.is_dir():   # a folder of shards grows; anyone else's files are not mixed with ours
            pattern = re.compile(rf"{re.escape(prefix)}-\d+\.parquet|\..*\.tmp|{re.escape(OWNER_FILE)}")
            other = sorted(p.name for p in self.out_dir.iterdir() if not pattern.fullmatch(p.name))
            if other:
                raise UserError(f"{self.out_dir}: holds files that are not trajectory shards ({other[0]!r}, ...); "
                                "choose an empty or new folder")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for path in self.out_dir.iterdir():   # a shard a kill interrupted mid-write: our own temp file, never read
            if re.fullmatch(rf"\.{re.escape(prefix)}-\d+\.parquet\..*\.tmp", path.name) and path.is_file():
                path.unlink()
        self.prefix = prefix
        self.rows_per_shard = rows_per_shard
        self.paths: list[Path] = []
        self._rows: list[dict[str, Any]] = []
        self._next_index = self._first_free_index()

    def _first_free_index(self) -> int:
        pattern = re.compile(rf"{re.escape(self.prefix)}-(\d+)\.parquet")
        taken = [int(m.group(1)) for p in self.out_dir.iterdir() if (m := pattern.fullmatch(p.name))]
        return max(taken, default=-1) + 1

    def add(self, episode: EpisodeRecord) -> None:
        self.write_rows(episode.rows())

    def write_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Rows of whole episodes, as dicts with the schema's columns (extra keys are ignored)."""
        for row in rows:
            missing = [name for name in SCHEMA.names if name not in row]
            if missing:
                raise ValueError(f"trajectory row lacks column {missing[0]!r}")
        self._rows.extend(rows)
        if len(self._rows) >= self.rows_per_shard:
            self.flush()

    def flush(self) -> Path | None:
        """Write the buffered episodes as the next shard; returns its path (None when nothing was buffered)."""
        if not self._rows:
            return None
        table = trajectory_table(self._rows)
        path = self.out_dir / shard_name(self.prefix, self._next_index)
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        self._rows = []
        self._next_index += 1
        self.paths.append(path)
        return path

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # buffered rows are whole episodes, so they are worth keeping even when the caller failed


def trajectory_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows as a table of the schema, marked as agentprm's (schema metadata): what makes the file replaceable."""
    return pa.Table.from_pylist(list(rows), schema=SCHEMA).replace_schema_metadata({META_KEY: b'{"kind": "trajectories"}'})


def write_episodes_file(path: str | Path, episodes: Iterable[EpisodeRecord]) -> Path:
    """All episodes as one Parquet file, written atomically (for small outputs such as expert demos)."""
    rows = [row for episode in episodes for row in episode.rows()]
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(trajectory_table(rows), tmp, compression="zstd")
    return path


def shard_files(path: str | Path) -> list[Path]:
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"{path}: {'not a regular file or folder' if path.exists() else 'no such trajectory file or folder'}")
    files = sorted(path.glob("*.parquet"))
    if not files:
        raise UserError(f"{path}: no .parquet trajectory shards in this folder")
    odd = next((f for f in files if not f.is_file()), None)
    if odd is not None:   # a FIFO would block the reader
        raise UserError(f"{odd}: not a regular file")
    return files


def read_shard(path: Path) -> pa.Table:
    """One shard, with the schema's columns checked and cast to the schema's types (extra columns are kept)."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({e})") from None
    table = with_candidates(with_provenance(table))
    for col in SCHEMA:
        if col.name not in table.column_names:
            raise UserError(f"{path}: missing column '{col.name}'")
        idx = table.column_names.index(col.name)
        if table.schema.field(idx).type != col.type:
            try:
                table = table.set_column(idx, col.name, table[col.name].cast(col.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise UserError(f"{path}: column '{col.name}' has type {table.schema.field(idx).type}, "
                                f"expected {col.type}") from None
    check_values(table, SCHEMA, path)
    return table


def read_trajectories(path: str | Path) -> pa.Table:
    """A shard file or a folder of shards as one table, sorted by (episode_id, turn)."""
    files = shard_files(path)
    tables = [read_shard(f) for f in files]
    try:
        return pa.concat_tables(tables, promote_options="default").sort_by(SORT_KEYS)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:   # the schema's columns are conformed: an extra one disagrees
        seen: dict[str, tuple[pa.DataType, Path]] = {}
        for file, table in zip(files, tables):
            for f in table.schema:
                if f.name in seen and seen[f.name][0] != f.type:
                    raise UserError(f"{file}: column '{f.name}' has type {f.type} where {seen[f.name][1].name} has "
                                    f"{seen[f.name][0]}; the shards of one folder must agree") from None
                seen.setdefault(f.name, (f.type, file))
        raise UserError(f"{path}: its shards cannot be read together ({e})") from None


def iter_episodes(table: pa.Table) -> Iterator[EpisodeRecord]:
    """Rebuild episodes from rows (any order); each episode's turns must run 0..n-1."""
    current: EpisodeRecord | None = None
    for batch in table.sort_by(SORT_KEYS).to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            if current is None or row["episode_id"] != current.episode_id:
                if current is not None:
                    yield _checked(current)
                current = EpisodeRecord(**{k: row[k] for k in EPISODE_COLUMNS})
            current.error = row["error"] or current.error  # writers other than `add` may set it on the last row only
            step = {k: row[k] for k in STEP_COLUMNS}
            current.steps.append(StepRecord(**{**step, **{k: tuple(step[k] or ()) for k in ("admissible",
                                                                                             *CANDIDATES)}}))
    if current is not None:
        yield _checked(current)


def _checked(episode: EpisodeRecord) -> EpisodeRecord:
    turns = [s.turn for s in episode.steps]
    if turns != list(range(len(turns))):
        raise UserError(f"episode {episode.episode_id!r}: turns {turns[:10]} are not 0..{len(turns) - 1} "
                        "(rows duplicated or missing, e.g. the same shard read twice)")
    return episode


# Branch episodes (rollout/branch.py) are named after the episode they replay and their branch turn k, reset
# episodes after theirs and their handover turn; the ids stay readable, the provenance columns say what they are.
_LEGACY_ORIGIN_RE = re.compile(r"-(reset|branch)(\d+)$")


def branch_episode_id(episode_id: str, turn: int) -> str:
    return f"{episode_id}-branch{turn}"


def branch_parent(episode_id: str) -> str:
    """The episode a branch episode (`branch_episode_id`) leaves."""
    return episode_id[:episode_id.rindex("-branch")]


def with_provenance(table: pa.Table) -> pa.Table:
    """`table` with the provenance columns; a table written before they existed (no `origin` column) gets them
    from its episode ids, the one place that still reads an id suffix."""
    if "origin" in table.column_names or "episode_id" not in table.column_names:
        return table
    ids, matches = table["episode_id"].to_pylist(), {}
    for episode_id in dict.fromkeys(ids):
        m = _LEGACY_ORIGIN_RE.search(str(episode_id)) if episode_id is not None else None   # types: checked later
        matches[episode_id] = (m.group(1), int(m.group(2))) if m else ("", 0)
    origin, turn = zip(*(matches[i] for i in ids)) if ids else ((), ())
    return table.append_column("origin", pa.array(origin, pa.string())).append_column(
        "origin_turn", pa.array(turn, pa.int32()))


def with_candidates(table: pa.Table) -> pa.Table:
    """`table` with the candidate columns; a table written before they existed gets them empty."""
    for name, kind in ((n, SCHEMA.field(n).type) for n in CANDIDATES):
        if name not in table.column_names:
            table = table.append_column(name, pa.array([[]] * table.num_rows, kind))
    return table
