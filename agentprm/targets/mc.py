"""Stage-1 Q-targets (AgentPRM, arXiv 2502.10325): Monte-Carlo estimates of Q^π(s, a) from rollouts of π.

Q-target, for G(s, a) the visits to the prefix (same task, same history, same action) across all rollouts:

    Q̂(s,a) = 1/|G(s,a)| · Σ_{(s_t,a_t) ∈ G(s,a)} Σ_{k=t}^{T-1} γ^(k−t) r_k

The discount counts from the visit's own turn t to the end of its episode. Branch episodes (rollout/branch.py)
count from their branch turn on. The paper's reference code applies
γ^t from the episode start instead, which shrinks the targets of late states for no reason; we do not.

Linear in the number of steps: state keys are chained incrementally along each episode (as `AgentState.key()`
does, one sha256 per step), returns-to-go are accumulated backwards (G_t = r_t + γ G_{t+1}, vectorised across
episodes), and the (state, action) groups are averaged by a pyarrow group-by. Only the columns needed are read.

Targets file: the Q-targets schema of `agentprm.data.tables` (TARGETS_SCHEMA), metadata kind "mc-targets".
"""
from __future__ import annotations

from dataclasses import dataclass
from hashlib import sha256
from json.encoder import encode_basestring_ascii as _json_str
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentprm.agent.format import parse_reply
from agentprm.agent.replay import episode_states
from agentprm.agent.state import AgentState
from agentprm.data.tables import TARGETS_SCHEMA, TableFile, conform
from agentprm.data.trajectories import (SCHEMA, SORT_KEYS, iter_episodes, read_trajectories, shard_files,
                                       with_provenance)
from agentprm.errors import UserError


@dataclass
class TargetsConfig:
    """The loop's `targets` section (stage 1: Monte-Carlo, continuation or shaped targets)."""
    gamma: float = 0.9              # discount, counted from each turn to the episode end. < 1 so that, among won
                                    # episodes (most of them), a step that wins sooner scores higher; with 1 every
                                    # step of a won episode has Q̂ = 1 (docs/results.md: 0.9 vs 1 on two seeds)
    shaping_alpha: float = 0.0      # process reward shaping (algo agentprm): mix Q̂ with π0's advantage A^μ by this
                                    # weight (0 = off; paper 0.5); V^μ is fitted once to π0's iteration-1 rollouts
    source: str = "mc"              # "mc": Monte-Carlo Q̂ of the sampling policy (the paper's); "continuation":
                                    # Q of greedy π_{i-1} for its top commands at sampled rollout states, each played
                                    # out once (targets/continuation.py: same-state alternatives)
    continuation_states: int = 600  # source continuation: rollout states sampled
    continuation_candidates: int = 4  # … and π_{i-1}'s top commands played out at each


ROLLOUT_COLUMNS = ("episode_id", "task_id", "task_type", "turn", "task", "observation", "action", "reward", "error",
                   "origin", "origin_turn")
ROLLOUT_SCHEMA = pa.schema([SCHEMA.field(name) for name in ROLLOUT_COLUMNS])


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


def returns_to_go(rewards, gamma: float, turns: np.ndarray | None = None) -> np.ndarray:
    """Σ_{k≥t} γ^(k−t) r_k for every row: of one episode's rewards in turn order, or (with `turns`) of rows sorted
    by (episode_id, turn) with turns 0..n-1. Backwards in turn order, vectorised across episodes:
    G_t = r_t + γ G_{t+1}, every row of turn t at once. The one return-to-go of the package (MC targets, GiGPO's
    step returns, the hacking detector's probe)."""
    g = np.asarray(rewards, dtype=np.float64).copy()
    turns = np.arange(len(g)) if turns is None else turns
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
    earlier rows are a replayed prefix followed by a forced action (`EpisodeRecord.first_target_turn`). None when
    every row counts."""
    branch = pc.equal(table["origin"], "branch").to_numpy(zero_copy_only=False)
    if not branch.any():
        return None
    return ~branch | (table["turn"].to_numpy() >= table["origin_turn"].to_numpy())


def mc_targets(table: pa.Table, gamma: float) -> pa.Table:
    """Q̂ (see the module doc) for a trajectory table sorted by (episode_id, turn) with every episode's turns
    0..n-1 (as `read_rollout_columns` returns it), failed episodes dropped."""
    if not 0.0 <= gamma <= 1.0:
        raise UserError(f"--gamma {gamma}: must be in [0, 1]")
    keys = state_keys(table)
    g = returns_to_go(table["reward"].to_numpy(), gamma, table["turn"].to_numpy())
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
        tables.append(conform(with_provenance(table), ROLLOUT_SCHEMA, shard, "trajectory"))
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


def targets_from_rollouts(rollouts: str | Path, gamma: float) -> TableFile:
    """Read a trajectory file or folder and estimate Q̂; `info` records where the targets came from."""
    table = read_rollout_columns(rollouts)
    kept = drop_failed_episodes(table)
    targets = mc_targets(kept, gamma)
    episodes, kept_episodes = len(pc.unique(table["episode_id"])), len(pc.unique(kept["episode_id"]))
    info = {"kind": "mc-targets", "rollouts": str(Path(rollouts).resolve()), "gamma": gamma,
            "episodes": kept_episodes, "failed_episodes_dropped": episodes - kept_episodes, "steps": kept.num_rows}
    return TableFile(targets, info, Path(rollouts))


def load_states(targets: TableFile, rollouts: str | Path | None = None) -> list[AgentState]:
    """The state of every target row, replayed from its (episode_id, turn) reference in the rollouts."""
    rollouts = rollouts or targets.info.get("rollouts")
    if not rollouts:
        raise UserError(f"{targets.path}: no 'rollouts' path in its metadata; pass the rollouts explicitly")
    refs = list(zip(targets.table["episode_id"].to_pylist(), targets.table["turn"].to_pylist()))
    wanted = set(refs)
    table = read_trajectories(rollouts)
    table = table.filter(pc.is_in(table["episode_id"], value_set=targets.table["episode_id"].unique()))
    found: dict[tuple[str, int], AgentState] = {}
    for episode in iter_episodes(table):
        for turn, (state, _) in enumerate(episode_states(episode)):
            if (episode.episode_id, turn) in wanted:
                found[(episode.episode_id, turn)] = state
    states = []
    for ref, key in zip(refs, targets.table["state_key"].to_pylist()):
        state = found.get(ref)
        if state is None or state.key() != key:
            problem = "is missing" if state is None else "has another history"
            raise UserError(f"{rollouts}: episode {ref[0]!r} turn {ref[1]} {problem} (targets {targets.path} "
                            "were made from other rollouts?)")
        states.append(state)
    return states
