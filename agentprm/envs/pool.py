"""`EnvPool`: text environments hosted in long-lived worker processes, stepped together.

    factory = functools.partial(AlfWorldEnv, game_dir, max_steps=50)   # any picklable () -> TextEnv
    with EnvPool(num_workers=2, num_slots=8) as pool:
        turn = pool.reset(0, factory)                                   # or reset_many({slot: factory})
        turns = pool.step({0: "go to shelf 1", 1: "look"})            # {slot: Turn}
        ticket = pool.submit({2: ("reset", factory), 0: ("step", "look")})   # returns at once ...
        turns = pool.gather(ticket)                                     # ... the answers, when wanted

Slots are numbered 0..num_slots-1; slot s lives in worker s % num_workers (default: one slot per worker).
More slots than workers lets an agent batch more episodes per call while the CPU work stays at one process per
core. A step sends every worker its slots' actions first, then collects the answers, so workers run in parallel.
`submit`/`gather` split that in two, so the caller can work (e.g. run the model for other slots) while the workers
step; several tickets may be outstanding, and are gathered in the order they were submitted.

Why processes: ALFWorld steps are CPU-bound Python, and Fast Downward can raise SystemExit on a bad problem.
Failures cost only the episodes they hit, reported as that slot's Turn with `done=True, won=False` and
`info["error"]` holding the reason:
- an env (or its factory) raises anything, SystemExit included: that env is dropped, the worker keeps serving;
- a worker dies (os._exit, a signal, out of memory) or, with `timeout`, does not answer in time: it is replaced;
  the episodes it hosted are lost (their next step reports the error) and every slot can be reset again.

Workers are reused across episodes (a reset builds a new env in the same process), so start-up (imports, and the
per-process step caches of `agentprm.envs.alfworld.speedups`) is paid once per worker. They use an explicit
multiprocessing context (forkserver by default: no fork of a parent holding threads or CUDA state), ignore Ctrl-C
(the parent shuts them down) and run torch with one thread. Fast Downward overwrites `sys.argv` in the worker,
not in the parent.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Mapping

from agentprm.envs.base import TextEnv, Turn

EnvFactory = Callable[[], TextEnv]
_JOIN_S = 5.0


# ------------------------------------------------------------------------------------------------ worker side


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _limit_threads() -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    if "torch" in sys.modules:  # imported by the forkserver's copy of __main__
        sys.modules["torch"].set_num_threads(1)


def _close_quietly(env: TextEnv | None) -> None:
    try:
        if env is not None:
            env.close()
    except Exception:  # a broken env must not take the worker down with it
        pass


def _serve(envs: dict[int, TextEnv], cmd: str, slot: int, arg: Any) -> tuple[bool, Any]:
    """(True, Turn) or (False, reason). SystemExit is caught too: it drops this env, not the worker's others."""
    try:
        if cmd == "reset":
            _close_quietly(envs.pop(slot, None))
            envs[slot] = arg()
            return True, envs[slot].reset()
        return True, envs[slot].step(arg)
    except BaseException as e:
        _close_quietly(envs.pop(slot, None))
        return False, _describe(e)


def _worker_main(conn: Connection) -> None:
    """Serve [(slot, cmd, arg), ...] requests with [(slot, ok, value), ...] until told to close (None)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_threads()
    envs: dict[int, TextEnv] = {}
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):  # the pool is gone (closed, or its process killed: a reset pipe)
            break
        if batch is None:
            break
        try:
            conn.send([(slot, *_serve(envs, cmd, slot, arg)) for slot, cmd, arg in batch])
        except OSError:   # the pool died while this batch was served: nobody to answer, nothing to report
            break
    for env in envs.values():
        _close_quietly(env)


# ------------------------------------------------------------------------------------------------ parent side

POOLS = ("local", "ray")
_kind, _address = "local", ""   # this process's choice (configure_pool), like models/device.py's placement


def configure_pool(kind: str = "local", address: str = "") -> None:
    """Where every pool this process opens runs its env workers: `local` processes, or `ray` actors (on the cluster
    at `address`, or a local Ray started on first use). Set once by the loop (`rollout.pool`) or a command
    (`--pool`)."""
    global _kind, _address
    if kind not in POOLS:
        raise ValueError(f"unknown pool {kind!r}; known: {', '.join(POOLS)}")
    _kind, _address = kind, address


def configured_ray_address() -> str:
    """The Ray cluster this process was pointed at (`rollout.ray_address` / `--ray-address`), for anything else it
    runs on Ray (generation replicas, agent/replicas.py): one address for all of it."""
    return _address


def open_pool(num_workers: int, num_slots: int | None = None, **kwargs) -> EnvPool:
    """An `EnvPool` of the configured kind: the one constructor the rollout engine, beam search and the oracle use."""
    if _kind == "ray":
        from agentprm.envs.ray_pool import RayEnvPool

        return RayEnvPool(num_workers, num_slots=num_slots, address=_address, **kwargs)
    return EnvPool(num_workers, num_slots=num_slots, **kwargs)



@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection


@dataclass
class Ticket:
    """Requests sent by `EnvPool.submit`, answered by `EnvPool.gather`."""
    slots: list[int]                              # in the order submitted
    batches: dict[int, list[int]]                 # worker -> the slots whose requests went to it
    sent_to: dict[int, _Worker]                   # the worker process each batch went to
    failed: dict[int, Turn]                       # slots answered without asking a worker (episode already lost)


@dataclass
class _Slot:
    task: str = ""          # the running episode's task, kept for the Turn that reports a failure
    active: bool = False    # an episode is running: step() is allowed
    doing: str = ""         # the last request, for error messages
    lost: str = ""          # why the episode was lost with its worker, reported at its next step
    ended: str = ""         # why the last episode ended on a failure (a reset that timed out), for the next step


class EnvPool:
    """`num_slots` env slots (default `num_workers`) over `num_workers` processes; see the module docstring."""

    def __init__(self, num_workers: int, *, num_slots: int | None = None, context: str = "forkserver",
                 timeout: float | None = None):
        if num_workers < 1 or (num_slots is not None and num_slots < 1):
            raise ValueError("num_workers and num_slots must be at least 1")
        self._ctx = get_context(context)
        self.timeout = timeout
        self._workers = [self._start() for _ in range(num_workers)]
        self._slots = [_Slot() for _ in range(num_slots or num_workers)]
        self._outstanding: deque[Ticket] = deque()

    @property
    def num_workers(self) -> int:
        return len(self._workers)

    @property
    def local_workers(self) -> int:
        """The workers on this machine, competing with its model for the cores (`models/device.py sharing_cores`)."""
        return self.num_workers

    @property
    def num_slots(self) -> int:
        return len(self._slots)

    def worker_of(self, slot: int) -> int:
        return slot % len(self._workers)

    def _start(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, args=(child_conn,), daemon=True, name="agentprm-env")
        process.start()
        child_conn.close()  # so the parent sees EOF when the worker dies
        return _Worker(process, parent_conn)

    def _stop(self, worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(_JOIN_S)
        worker.conn.close()

    def _replace(self, w: int, reason: str) -> None:
        """Start a fresh worker w; the episodes the old one hosted are lost for `reason`."""
        self._stop(self._workers[w])
        self._workers[w] = self._start()
        for slot in self._slots_of(w):
            if self._slots[slot].active:
                self._slots[slot].lost = f"episode lost with its worker ({reason})"

    def _slots_of(self, w: int) -> range:
        return range(w, len(self._slots), len(self._workers))

    def reset(self, slot: int, factory: EnvFactory) -> Turn:
        return self.reset_many({slot: factory})[slot]

    def reset_many(self, factories: Mapping[int, EnvFactory]) -> dict[int, Turn]:
        """Start a new episode on each slot, its env built by the factory in the slot's worker."""
        return self.gather(self.submit({slot: ("reset", f) for slot, f in factories.items()}))

    def step(self, actions: Mapping[int, str]) -> dict[int, Turn]:
        """Every slot's action is sent before any answer is awaited, so the workers step in parallel."""
        return self.gather(self.submit({slot: ("step", a) for slot, a in actions.items()}))

    def submit(self, requests: Mapping[int, tuple[str, Any]]) -> Ticket:
        """Send ("reset", factory) or ("step", action) per slot to the workers and return without waiting."""
        for slot, (cmd, arg) in requests.items():
            self._check_slot(slot)
            if cmd == "reset":
                if not self._alive(self.worker_of(slot)) and not self._outstanding:
                    self._replace(self.worker_of(slot), "worker died between requests")  # died while idle
                self._slots[slot] = _Slot(doing=f"resetting {repr(arg)[:300]}")
            elif cmd == "step":
                if not self._slots[slot].active:
                    why = self._slots[slot].ended
                    raise ValueError(f"slot {slot} has no running episode: "
                                     + (f"it failed ({why}); reset it again" if why else "reset it first"))
                self._slots[slot].doing = f"stepping {arg!r}"
            else:
                raise ValueError(f"unknown request {cmd!r}")
        failed = {slot: self._fail(slot, self._slots[slot].lost, worker_lost=True)
                  for slot, (cmd, _) in requests.items() if cmd == "step" and self._slots[slot].lost}
        batches: dict[int, list[tuple[int, str, Any]]] = {}
        for slot, (cmd, arg) in requests.items():
            if slot not in failed:
                batches.setdefault(self.worker_of(slot), []).append((slot, cmd, arg))
        payloads = {w: bytes(ForkingPickler.dumps(batch)) for w, batch in batches.items()}  # fail before sending
        for w, payload in payloads.items():
            self._send(w, payload)
        ticket = Ticket(list(requests), {w: [slot for slot, _, _ in b] for w, b in batches.items()},
                        {w: self._workers[w] for w in batches}, failed)
        self._outstanding.append(ticket)
        return ticket

    def gather(self, ticket: Ticket) -> dict[int, Turn]:
        """The answers to `ticket` (the oldest outstanding one) as {slot: Turn}."""
        if not self._outstanding or self._outstanding[0] is not ticket:
            raise ValueError("tickets must be gathered in the order they were submitted")
        self._outstanding.popleft()
        results = dict(ticket.failed)
        live = [w for w in ticket.batches if self._workers[w] is ticket.sent_to[w]]
        for w in ticket.batches:
            if w not in live:  # replaced since: what it was sent is lost with it
                lost = "episode lost with its worker"
                results.update({slot: self._fail(slot, lost, worker_lost=True) for slot in ticket.batches[w]})
        for w, replies in self._collect(live).items():
            if isinstance(replies, str):  # the worker died or hung: every slot it was serving failed
                results.update({slot: self._fail(slot, replies, worker_lost=True) for slot in ticket.batches[w]})
            else:
                results.update({slot: self._receive(slot, ok, value) for slot, ok, value in replies})
        return {slot: results[slot] for slot in ticket.slots}

    # the transport to the workers: processes and pipes here; envs/ray_pool.py overrides these five for Ray actors
    def _alive(self, w: int) -> bool:
        return self._workers[w].process.is_alive()

    def _send(self, w: int, payload: bytes) -> None:
        try:
            self._workers[w].conn.send_bytes(payload)
        except OSError:  # already gone: its EOF is read when collecting
            pass

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < len(self._slots):
            raise IndexError(f"slot {slot} out of range: the pool has {len(self._slots)} slots")

    def _collect(self, workers: list[int]) -> dict[int, list | str]:
        """Each worker's replies, or the reason it gave none (it is then replaced)."""
        pending = {self._workers[w].conn: w for w in workers}
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        out: dict[int, list | str] = {}
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(list(pending), timeout=left)
            if not ready:
                out.update({w: f"no answer within {self.timeout:g} s" for w in pending.values()})
                break
            for conn in ready:
                w = pending.pop(conn)
                try:
                    out[w] = conn.recv()
                except (EOFError, OSError):
                    out[w] = self._exit_reason(self._workers[w].process)
        for w, replies in out.items():
            if isinstance(replies, str):
                self._replace(w, replies)
        return out

    @staticmethod
    def _exit_reason(process: BaseProcess) -> str:
        process.join(_JOIN_S)
        code = process.exitcode
        if code is None:
            return "worker closed its connection"
        if code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with code {code}"

    def _receive(self, slot: int, ok: bool, value: Any) -> Turn:
        if not ok:
            return self._fail(slot, value)
        state = self._slots[slot]
        state.task, state.active = value.task, not value.done
        return value

    def _fail(self, slot: int, reason: str, worker_lost: bool = False) -> Turn:
        """The failed answer of `slot`; `worker_lost` when its worker died, hung or was replaced (the episode was
        fine, its process was not: worth playing again), not when its own env raised."""
        state = self._slots[slot]
        error = f"{reason} (while {state.doing})"
        self._slots[slot] = _Slot(task=state.task, ended=error)
        return Turn(task=state.task, observation="", admissible=(), done=True,
                    info={"error": error, **({"worker_lost": True} if worker_lost else {})})

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._workers:
            worker.process.join(_JOIN_S)
            self._stop(worker)
        self._workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
