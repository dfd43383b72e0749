"""Preference pairs for relative PRM losses: two actions at the same state whose Q̂ differ by more than δ.

Pairs file: the pairs schema of `agentprm.data.tables` (PAIRS_SCHEMA).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow as pa

from agentprm.data.tables import PAIRS_SCHEMA, TableFile
from agentprm.errors import UserError




def pair_indices(state_keys: list[str], q: list[float], delta: float) -> list[tuple[int, int]]:
    """(chosen row, rejected row) for every two rows with the same state key and q[chosen] − q[rejected] > δ."""
    if delta < 0:
        raise UserError(f"--delta {delta}: must be >= 0")
    rows_of: dict[str, list[int]] = defaultdict(list)
    for i, key in enumerate(state_keys):
        rows_of[key].append(i)
    return [(i, j) for rows in rows_of.values() if len(rows) > 1
            for i in rows for j in rows if q[i] - q[j] > delta]


def make_pairs(targets: pa.Table, delta: float) -> pa.Table:
    """All pairs of a targets table (see the module doc)."""
    pairs = pair_indices(targets["state_key"].to_pylist(), targets["q"].to_pylist(), delta)
    chosen = pa.array([i for i, _ in pairs], pa.int64())
    rejected = pa.array([j for _, j in pairs], pa.int64())
    return pa.table({
        "state_key": targets["state_key"].take(chosen),
        "chosen": targets["action"].take(chosen),
        "rejected": targets["action"].take(rejected),
        "q_chosen": targets["q"].take(chosen),
        "q_rejected": targets["q"].take(rejected),
        **{name: targets[name].take(chosen) for name in ("task_id", "task_type", "episode_id", "turn")},
    }, schema=PAIRS_SCHEMA)


def pairs_counts(pairs: pa.Table, targets: pa.Table) -> dict:
    """How much same-state signal a pairs table holds: its pairs, the states and games they are at, and how many
    rest on averaged labels — both Q̂ of the pair a mean over at least 2 rollout visits (a pair of single-visit
    Q̂s is two sampled returns, not two estimates)."""
    visits = dict(zip(zip(targets["state_key"].to_pylist(), targets["action"].to_pylist()),
                      targets["visits"].to_pylist()))
    keys = pairs["state_key"].to_pylist()
    averaged = sum(min(visits[(k, a)], visits[(k, b)]) >= 2
                   for k, a, b in zip(keys, pairs["chosen"].to_pylist(), pairs["rejected"].to_pylist()))
    return {"pairs": pairs.num_rows, "states": len(set(keys)), "games": len(set(pairs["task_id"].to_pylist())),
            "averaged_pairs": averaged}


def pairs_info(targets: TableFile, delta: float) -> dict:
    return {**targets.info, "kind": "pairs", "targets": str(Path(targets.path).resolve()), "delta": delta}
