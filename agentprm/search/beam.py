"""PRM-guided beam search at test time (Q-guided search, docs/algorithms.md §5), against Best-of-N.

At every turn each unfinished branch draws `expand` replies from the policy; every (branch, reply) is scored by
the PRM, and the `width` best — finished branches competing with their last score — form the next beam:

    beam = [start]
    until every branch is done:
        candidates = finished branches ∪ {(b, a) : b unfinished, a ∈ sample(π, b.state, expand)}, scored Q(s_b, a)
        beam = top-`width` candidates by score; step each new (b, a) in its env
    return the best-scored branch

The winner is picked by the PRM alone (never by the env's won flag), so the result is an honest test-time
method given a resettable simulator. Each branch lives in a pool slot; a branch's first kept child inherits the
slot and steps in place, any other child restores the parent's env by replaying its commands in a fresh env
(ALFWorld is deterministic; the replay is checked against the parent's last observation).

Equal-sample comparison: beam(width=k, expand=m) draws k·m replies per turn, Best-of-N draws N; compare
`BestOfNAgent(N=k·m)` with beam(k, m). `BeamResult` counts policy samples, PRM scores and env steps (replays
included) for that bookkeeping.
"""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Sequence

from agentprm.agent.critic import Critic
from agentprm.agent.format import parse_reply
from agentprm.agent.state import AgentState
from agentprm.data.summary import summarize
from agentprm.data.trajectories import EpisodeRecord, StepRecord
from agentprm.envs.base import TaskSpec, Turn
from agentprm.envs.pool import EnvPool, open_pool
from agentprm.envs.registry import env_factory, require_replay
from agentprm.models.device import sharing_cores
from agentprm.search.uniform import hash64


@dataclass(frozen=True)
class Branch:
    steps: tuple[StepRecord, ...]
    commands: tuple[str, ...]        # what the env received, replayed to restore this branch
    state: AgentState
    turn: Turn                       # the env's latest answer
    score: float                     # PRM score of the last action (−inf at the start)
    slot: int = -1                   # pool slot holding this branch's env (unfinished branches only)

    @property
    def done(self) -> bool:
        return self.turn.done


@dataclass
class BeamResult:
    episode: EpisodeRecord
    policy_samples: int = 0
    prm_scores: int = 0
    env_steps: int = 0


def beam_search(task: TaskSpec, generator, prm: Critic, pool: EnvPool, *, width: int, expand: int, max_steps: int,
                episode_id: str = "beam", seed: int = 0) -> BeamResult:
    """One episode of `task`; `pool` needs at least `width` slots (slots 0..width-1 are used)."""
    require_replay([task], "beam search")
    factory = env_factory(task, max_steps)
    record = EpisodeRecord(episode_id, task.task_id, task.task_type, "",
                           f"{generator.name}+beam{width}x{expand}", seed)
    result = BeamResult(record)
    first = pool.reset(0, factory)
    if first.info.get("error"):
        record.error = first.info["error"]
        return result
    record.task = first.task
    beam = [Branch((), (), AgentState.start(first, task.task_id), first, -math.inf, slot=0)]
    while not all(b.done for b in beam):
        alive = [b for b in beam if not b.done]
        samples = generator.sample([b.state for b in alive], [b.turn for b in alive], expand)
        pairs = [(b, r) for b, replies in zip(alive, samples) for r in dict.fromkeys(replies)]
        q = prm.score([b.state for b, _ in pairs], [r for _, r in pairs]).tolist()
        weighed: dict[int, tuple[list, list]] = {}   # per branch: its distinct samples and their scores
        for (b, r), score in zip(pairs, q):
            replies, scores = weighed.setdefault(id(b), ([], []))
            replies.append(r)
            scores.append(score)
        result.policy_samples += expand * len(alive)
        result.prm_scores += len(pairs)
        # finished branches first, so a tie keeps what is already complete; sorted() is stable
        ranked = sorted([(b.score, b, None) for b in beam if b.done] + [(s, b, r) for (b, r), s in zip(pairs, q)],
                        key=lambda c: -c[0])[:width]
        beam = [b for _, b, r in ranked if r is None] + _advance(pool, factory, alive, [
            (b, r, s) for s, b, r in ranked if r is not None], width, result, weighed)
    best = max(beam, key=lambda b: b.score)   # max() keeps the first of equals
    record.steps = list(best.steps)
    record.error = best.turn.info.get("error", "")
    return result


def _advance(pool: EnvPool, factory, alive: Sequence[Branch], children: Sequence[tuple[Branch, str, float]],
             width: int, result: BeamResult, weighed: dict[int, tuple[list, list]]) -> list[Branch]:
    """Step every kept (parent, reply): the first child of a parent inherits its slot, the others take free slots
    and replay the parent's commands first. A child's step keeps what its parent weighed (`weighed[id(parent)]`:
    the samples and their scores)."""
    inherited: set[int] = set()
    slots, replays = [], {}
    for parent, _, _ in children:
        if parent.slot not in inherited:
            inherited.add(parent.slot)
            slots.append(parent.slot)
        else:
            slots.append(-1)
    free = iter(s for s in range(width) if s not in inherited)
    for k, (parent, _, _) in enumerate(children):
        if slots[k] == -1:
            slots[k] = next(free)
            replays[slots[k]] = parent
    _replay(pool, factory, replays, result)
    commands = {slot: parse_reply(reply)[1] for slot, (_, reply, _) in zip(slots, children)}
    turns = pool.step(commands)
    result.env_steps += len(commands)
    out = []
    for slot, (parent, reply, score) in zip(slots, children):
        nxt, command = turns[slot], commands[slot]
        step = StepRecord.from_turns(len(parent.steps), parent.turn, reply, nxt, weighed.get(id(parent), ((), ())))
        state = parent.state if nxt.done else parent.state.advance(command, nxt)
        out.append(Branch((*parent.steps, step), (*parent.commands, command), state, nxt, score, slot))
    return out


def _replay(pool: EnvPool, factory, replays: dict[int, Branch], result: BeamResult) -> None:
    if not replays:
        return
    turns = pool.reset_many({slot: factory for slot in replays})
    for t in range(max(len(b.commands) for b in replays.values())):
        turns.update(pool.step({s: b.commands[t] for s, b in replays.items() if t < len(b.commands)}))
        result.env_steps += sum(t < len(b.commands) for b in replays.values())
    for slot, parent in replays.items():
        if turns[slot].observation != parent.turn.observation:
            raise RuntimeError(f"replaying {len(parent.commands)} commands of {parent.state.task_id!r} did not "
                               f"restore the branch (env not deterministic?): {turns[slot].observation[:200]!r}")


def play_beam(tasks: Sequence[TaskSpec], generator, prm: Critic, *, width: int, expand: int, max_steps: int, seed: int = 0,
              tag: str = "beam", workers: int = 1, per_task: int = 1) -> tuple[list[EpisodeRecord], dict]:
    """Beam search on every task `per_task` times; episodes and their summary (plus the sample/step counts).

    `workers` episodes are played at once, each in a thread with an env worker process of its own, so one
    episode's model forwards run while another waits for its envs (torch and the env pipes release the GIL):
    216 games with Q1 in 122 s instead of 179 s on 2 cores (bench/beam_workers.py); the lanes split torch's
    threads between them (`sharing_cores`: one each on 2 cores, 82 s against 96 s with two each). Every episode
    samples from its own stream (`generator.fork`, seeded by `seed`, the task and the repeat), so the results do not
    depend on `workers` or on timing — and two searches with the same seed draw the same first candidates (common random
    numbers for a paired comparison such as Q vs the uniform control)."""
    require_replay(tasks, "beam search")
    start = time.monotonic()
    jobs = list(enumerate((task, k) for task in tasks for k in range(per_task)))
    results: list[BeamResult | None] = [None] * len(jobs)
    queue, lock, stop = iter(jobs), threading.Lock(), threading.Event()

    def lane() -> None:
        with open_pool(1, num_slots=width) as pool:
            while not stop.is_set():
                with lock:
                    job = next(queue, None)
                if job is None:
                    return
                i, (task, k) = job
                results[i] = beam_search(task, generator.fork(episode_seed(seed, task.task_id, k)), prm, pool,
                                         width=width, expand=expand, max_steps=max_steps,
                                         episode_id=f"{tag}-s{seed}-{task.task_id}-{k}", seed=seed)

    lanes = max(1, min(workers, len(jobs)))
    with sharing_cores(0, lanes), ThreadPoolExecutor(lanes) as threads:
        futures = [threads.submit(lane) for _ in range(lanes)]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:   # an error or Ctrl-C: the other lanes stop after their current episode instead of playing on
            stop.set()
        for future in futures:
            future.result()
    episodes = [r.episode for r in results]
    summary = summarize(episodes)
    for key in ("policy_samples", "prm_scores", "env_steps"):
        summary[key] = sum(getattr(r, key) for r in results)
    summary["seconds"] = round(time.monotonic() - start, 1)
    return episodes, summary


def episode_seed(seed: int, task_id: str, repeat: int) -> int:
    """The sampling seed of one search episode: a function of the run's seed, the task and the repeat only."""
    return hash64(seed, task_id, repeat)
