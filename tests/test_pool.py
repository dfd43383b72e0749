import functools
import json
import os
import pickle
import random
import time
from pathlib import Path

import pytest

from agentprm.envs.alfworld.engine import AlfWorldEnv
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.base import Turn
from agentprm.envs.pool import EnvPool

ACTIONS = ("inc", "exit", "sysexit", "raise", "hang")


class CountingEnv:
    """Wins on the third "inc"; the other actions make it misbehave the ways a real engine can."""
    task_id = "count"
    task_type = "fake"

    def reset(self) -> Turn:
        self.n = 0
        return Turn(task="count to 3", observation="0", admissible=ACTIONS, info={"pid": os.getpid()})

    def step(self, action: str) -> Turn:
        if action == "exit":
            os._exit(1)
        if action == "sysexit":
            raise SystemExit(3)  # what Fast Downward does on a bad problem
        if action == "raise":
            raise RuntimeError("engine broke")
        if action == "hang":
            time.sleep(60)
        self.n += 1
        won = self.n == 3
        return Turn(task="count to 3", observation=str(self.n), admissible=ACTIONS, reward=float(won), done=won,
                    won=won, info={"pid": os.getpid()})

    def close(self) -> None:
        pass


def broken_factory() -> CountingEnv:
    raise FileNotFoundError("no such game")


@pytest.fixture(scope="module")
def pool():
    with EnvPool(2, timeout=20) as pool:
        yield pool


@pytest.mark.parametrize("crash, reason, same_worker", [
    ("exit", "worker exited with code 1", False),
    ("sysexit", "SystemExit: 3", True),
    ("raise", "RuntimeError: engine broke", True),
])
def test_a_crash_costs_only_its_episode(pool, crash, reason, same_worker):
    first = pool.reset_many({0: CountingEnv, 1: CountingEnv})
    pool.step({0: "inc", 1: "inc"})
    turns = pool.step({0: crash, 1: "inc"})
    assert turns[0].done and not turns[0].won and turns[0].task == "count to 3"
    assert reason in turns[0].info["error"] and repr(crash) in turns[0].info["error"]
    assert turns[1].observation == "2" and not turns[1].done
    assert pool.step({1: "inc"})[1].won
    with pytest.raises(ValueError, match="slot 0"):
        pool.step({0: "inc"})
    again = pool.reset(0, CountingEnv)
    assert again.observation == "0"
    assert (again.info["pid"] == first[0].info["pid"]) == same_worker
    assert [pool.step({0: "inc"})[0].observation for _ in range(3)] == ["1", "2", "3"]


def test_workers_are_reused_across_episodes(pool):
    pids = {pool.reset(1, CountingEnv).info["pid"] for _ in range(3)}
    assert len(pids) == 1


def test_factory_error_is_reported_and_slot_recovers(pool):
    turn = pool.reset(0, broken_factory)
    assert turn.done and "FileNotFoundError: no such game" in turn.info["error"]
    assert pool.reset(0, CountingEnv).observation == "0"


def test_unpicklable_factory_raises_before_anything_is_sent(pool):
    with pytest.raises((AttributeError, pickle.PicklingError)):  # which one depends on the Python version
        pool.reset(0, lambda: CountingEnv())
    assert pool.reset(0, CountingEnv).observation == "0"


def test_slots_sharing_a_worker():
    with EnvPool(2, num_slots=3) as pool:
        assert [pool.worker_of(s) for s in range(3)] == [0, 1, 0]
        first = pool.reset_many({s: CountingEnv for s in range(3)})
        assert first[0].info["pid"] == first[2].info["pid"] != first[1].info["pid"]
        turns = pool.step({0: "inc", 1: "inc", 2: "raise"})
        assert [t.observation for t in turns.values()] == ["1", "1", ""]
        assert pool.step({0: "exit", 1: "inc"})[0].info["error"].startswith("worker exited with code 1")
        pool.reset(2, CountingEnv)  # on the replaced worker
        assert pool.step({2: "inc"})[2].observation == "1"
        with pytest.raises(IndexError):
            pool.reset(3, CountingEnv)


def test_outstanding_tickets_are_answered_in_order():
    with EnvPool(2, num_slots=4) as pool:
        pool.reset_many({s: CountingEnv for s in range(4)})
        first = pool.submit({0: ("step", "inc"), 1: ("step", "inc")})
        second = pool.submit({2: ("step", "inc"), 3: ("reset", CountingEnv), 0: ("step", "inc")})
        with pytest.raises(ValueError, match="order"):
            pool.gather(second)
        assert {s: t.observation for s, t in pool.gather(first).items()} == {0: "1", 1: "1"}
        assert {s: t.observation for s, t in pool.gather(second).items()} == {2: "1", 3: "0", 0: "2"}
        assert pool.step({0: "inc"})[0].won


def test_a_worker_dying_under_two_tickets_fails_both_without_hanging():
    with EnvPool(1, num_slots=2, timeout=20) as pool:
        pool.reset_many({0: CountingEnv, 1: CountingEnv})
        first = pool.submit({0: ("step", "exit")})
        second = pool.submit({1: ("step", "inc")})   # queued behind the crash, on the same worker
        assert "worker exited with code 1" in pool.gather(first)[0].info["error"]
        assert "episode lost with its worker" in pool.gather(second)[1].info["error"]
        assert pool.reset(1, CountingEnv).observation == "0"


def test_a_dying_worker_loses_the_episodes_it_hosted():
    with EnvPool(1, num_slots=2) as pool:
        pool.reset_many({0: CountingEnv, 1: CountingEnv})
        assert pool.step({0: "exit"})[0].done
        lost = pool.step({1: "inc"})[1]
        assert lost.done and "episode lost with its worker (worker exited with code 1)" in lost.info["error"]
        assert pool.reset(1, CountingEnv).observation == "0"


def test_hung_worker_is_killed_after_timeout():
    """A worker that does not answer within the timeout is replaced. Only the hanging step runs under the short
    timeout: the resets (a process started, an env built) get as long as a loaded machine needs."""
    with EnvPool(1, timeout=120) as pool:
        pool.reset(0, CountingEnv)
        pool.timeout = 1
        turn = pool.step({0: "hang"})[0]
        assert turn.done and "no answer within 1 s" in turn.info["error"]
        with pytest.raises(ValueError, match=r"slot 0 has no running episode: it failed \(no answer within 1 s"):
            pool.step({0: "inc"})   # says why, not just "reset it first"
        pool.timeout = 120
        assert pool.reset(0, CountingEnv).observation == "0"


@pytest.fixture(scope="module")
def games(generated_tasks) -> list[Path]:
    """Two small-room games: kitchens are the slowest to load."""
    return [Path(t.game) for t in load_tasks(generated_tasks.train) if t.floorplan > 30][:2]


def episodes_in_process(game: Path, seed: int) -> tuple[list[list[str]], list[list[Turn]]]:
    """An inadmissible action and seeded draws from the first admissible list, then the walkthrough:
    one env, two episodes."""
    rng = random.Random(seed)
    env = AlfWorldEnv(game)
    turn = env.reset()
    actions, turns = ["dance"], [turn]
    for _ in range(5):
        actions.append(rng.choice(sorted(turn.admissible)))
    turns += [env.step(a) for a in actions]
    walk = json.loads((game / "game.tw-pddl").read_text())["walkthrough"]
    walk_turns = [env.reset()] + [env.step(a) for a in walk]
    env.close()
    return [actions, walk], [turns, walk_turns]


def test_parallel_stepping_matches_in_process(games):
    expected = {slot: episodes_in_process(game, seed=slot) for slot, game in enumerate(games)}
    with EnvPool(len(games)) as pool:
        for episode in range(2):
            factories = {slot: functools.partial(AlfWorldEnv, game) for slot, game in enumerate(games)}
            got = {slot: [turn] for slot, turn in pool.reset_many(factories).items()}
            scripts = {slot: list(expected[slot][0][episode]) for slot in got}
            while any(scripts.values()):
                turns = pool.step({slot: script.pop(0) for slot, script in scripts.items() if script})
                for slot, turn in turns.items():
                    got[slot].append(turn)
            assert got == {slot: expected[slot][1][episode] for slot in got}


class CrashingEnv(AlfWorldEnv):
    """A real game whose worker process dies at its second step: once (then `marker` exists), or always."""

    def __init__(self, marker: str, always: bool, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.marker, self.always = Path(marker), always

    def step(self, action: str) -> Turn:
        if self._steps == 1 and (self.always or not self.marker.exists()):
            self.marker.touch()
            os._exit(1)
        return super().step(action)


@pytest.mark.parametrize("always", [False, True])
def test_episodes_lost_with_a_crashed_worker_are_played_again_once(generated_tasks, tmp_path, monkeypatch, always):
    """a worker crash used to cost every episode in flight on it as an error; they are replayed once on a
    fresh worker, and an episode that kills its worker every time ends as an error instead of looping."""
    from agentprm.agent.policies import RandomAgent
    from agentprm.rollout import engine

    tasks = load_tasks(generated_tasks.train)[:3]
    crash_on = tasks[0].task_id

    def factory(task, max_steps, expert):
        if task.task_id == crash_on:
            return functools.partial(CrashingEnv, str(tmp_path / "crashed"), always, task.game, max_steps=max_steps,
                                     task_id=task.task_id)
        return functools.partial(AlfWorldEnv, task.game, max_steps=max_steps, task_id=task.task_id)

    monkeypatch.setattr(engine, "env_factory", factory)
    jobs = engine.episode_jobs(tasks, per_task=1, seed=0, max_steps=4, tag="t")
    episodes = engine.run_episodes(jobs, RandomAgent(0), num_envs=3, num_workers=1, progress=False)
    assert sorted(e.episode_id for e in episodes) == sorted(j.episode_id for j in jobs)   # each exactly once
    failed = [e for e in episodes if e.error]
    if always:   # its second crash also costs the episodes that shared the worker then (already replayed once)
        crashed = next(e for e in failed if e.task_id == crash_on)
        assert "worker exited with code 1" in crashed.error
    else:
        assert not failed and all(len(e.steps) == 4 or e.steps[-1].done for e in episodes)


def test_a_worker_whose_pool_died_mid_request_ends_quietly():
    """The pool's process killed (SIGTERM) while a worker serves its batch: the answer cannot be sent (a broken pipe),
    and the worker ends without a traceback instead of one per worker on the terminal."""
    import multiprocessing
    import subprocess
    import sys

    code = ("import multiprocessing, sys; sys.path.insert(0, 'tests')\n"
            "from agentprm.envs.pool import _worker_main\n"
            "from test_pool import CountingEnv\n"
            "pool_end, worker_end = multiprocessing.Pipe()\n"
            "pool_end.send([(0, 'reset', CountingEnv)])\n"
            "pool_end.close()\n"
            "_worker_main(worker_end)\n"
            "print('ended')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stdout.strip() == "ended" and "Traceback" not in done.stderr, done.stderr
