"""Stage 1, alternative source — Q-targets of the greedy policy from continuations, several actions per state.

MC targets (targets/mc.py) estimate Q of the *sampling* policy (π_{i-1} at the rollout temperature) from one
action per visited state, so beyond the first turns a state has a single target: the PRM learns which tasks and
states succeed, not which action is better at a state — the one thing Best-of-N and the update use. And the
policy that is evaluated and improved is greedy π_{i-1}, whose Q differs from the sampling policy's.

Here, at `states` states sampled from π_{i-1}'s rollouts, the `candidates` commands π_{i-1} ranks highest are each
played and followed by greedy π_{i-1} to the end (rollout/oracle.py, one exact continuation each: ALFWorld and the
greedy policy are deterministic):

    Q̂(s, a) = γ^(T−1−t) · won          for every a in π_{i-1}'s top-`candidates` at s,

i.e. Q^{greedy π_{i-1}}(s, a) on train tasks, with same-state alternatives by construction. The rows use the MC
targets' schema (targets/mc.py; visits = 1; episode_id/turn point at the rollout state), so `train_prm` reads them
unchanged. Metadata kind "continuation-targets".
"""
from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa

from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.data.tables import TARGETS_SCHEMA, TableFile
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.rollout.oracle import OracleCritic

CHUNK = 64   # states scored per oracle call: bounds memory, keeps the env pool busy


def continuation_targets(rollouts: str | Path, tasks, policy_dir: str | Path, *, gamma: float, max_steps: int,
                         states: int, candidates: int, seed: int, mode: str = "choose", num_envs: int = 16,
                         workers: int | None = None) -> TableFile:
    visited: dict[str, tuple] = {}
    for episode in iter_episodes(read_trajectories(rollouts)):
        if episode.error:
            continue
        for turn, (state, _) in enumerate(episode_states(episode)):
            if len(state.admissible) > 1:
                visited.setdefault(state.key(), (state, episode, turn))
    picked = random.Random(seed).sample(list(visited.values()), min(states, len(visited)))
    picked.sort(key=lambda v: (v[1].episode_id, v[2]))   # rollout order: neighbouring states share prefixes
    ranker = LMAgent.load(policy_dir, mode=mode, distinct=True, seed=seed)
    rows = []
    with OracleCritic.greedy(policy_dir, tasks, mode=mode, gamma=gamma, max_steps=max_steps, num_envs=num_envs,
                             workers=workers, seed=seed) as oracle:
        for start in range(0, len(picked), CHUNK):
            chunk = picked[start:start + CHUNK]
            tops = ranker.sample([s for s, _, _ in chunk], [None] * len(chunk), candidates)
            flat = [(v, a) for v, top in zip(chunk, tops) for a in top]
            q = oracle.score([v[0] for v, _ in flat], [a for _, a in flat]).tolist()
            rows += [(v, a, value) for (v, a), value in zip(flat, q)]
        played, errors = oracle.episodes, oracle.errors
    table = pa.table({"state_key": [v[0].key() for v, _, _ in rows], "action": [a for _, a, _ in rows],
                      "q": [float(x) for _, _, x in rows], "visits": [1] * len(rows),
                      "task_id": [v[1].task_id for v, _, _ in rows], "task_type": [v[1].task_type for v, _, _ in rows],
                      "episode_id": [v[1].episode_id for v, _, _ in rows], "turn": [v[2] for v, _, _ in rows]},
                     schema=TARGETS_SCHEMA)
    info = {"kind": "continuation-targets", "rollouts": str(Path(rollouts).resolve()), "gamma": gamma,
            "policy": str(Path(policy_dir).resolve()), "states": len(picked), "candidates": candidates,
            "continuations": played, "failed_continuations": errors}
    return TableFile(table, info, Path(rollouts))
