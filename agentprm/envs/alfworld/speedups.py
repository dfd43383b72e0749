"""Remove what dominated TextWorld-PDDL step and load time, with byte-identical transcripts:

1. TatSu parses. `PddlEnv` re-parses the same grammar snippets for every admissible command on every step, and
   `GameLogic` the same grammar file (every game embeds it) at every env load; parse trees are cached and
   deep-copied on the way out because derivation mutates them. `Rule.parse_conjunctive_query` (grammar rule
   conditions) is likewise pure and cached.
2. Fast Downward's PDDL→SAS translation, run twice per `load()` and again per `reset()` for the same problem.
   Cached per (domain, problem, optimize) in memory, and its SAS text on disk (`sas_cache_dir()`, one file per
   sha256 of the key): without the disk cache every new env process translated each game it had not loaded
   before, most of an episode's env time (`bench/env_resets.py` measures a first reset with and without it). A
   disk hit re-parses and normalises the PDDL (the `task` object the engine also needs, a small share of the
   translation's cost) and reads the SAS text. The result is read-only for the engine. Each entry carries the
   sha256 of its text and is checked on read (a corrupt or truncated entry is removed and translated again, not
   failed on forever); the folder is bounded, least recently used entries first (`$AGENTPRM_SAS_CACHE_MB`, default
   8192: a game's entry is ~0.65 MB, so ~12,000 games). The bound must hold the games a run plays: rollouts visit
   the games in order, the worst case for LRU, so a bound below them evicts each game's entry before its turn comes
   and every first reset translates again — measured at 3,000 train games under the old 2,048 MB default: 1,484
   entries re-translated within 35 min of rollouts and the rollouts' rows/s halved. An eviction says so, once a
   process, on stderr.
3. Deep copies of the grammar's derivation context. Every admissible command's text is derived anew each step,
   and `textgen.copy_context` deep-copies the context's `variables` (name -> EntityInfo) and `mapping`
   (Placeholder -> Variable) for every symbol: three quarters of a step's time once 1 and 2 are cached. Copying
   the two dicts is enough: derivation adds keys to them (`query`) but never mutates their values (the
   grammar's `{...}` expressions only read attributes, e.g. `{o.indefinite + ' ' + o.name}`, `{r.name or r.id}`).
4. Re-deriving the admissible commands of a state already seen. They are a function of the game and its PDDL
   facts, so they are cached per (game, facts): an inadmissible command leaves the state as it was, and the K
   rollouts of a task keep passing through the same states. A hit skips the planner's applicable-operator query
   and every command's derivation (most of a step); it restores the operator table that `apply` reads. At most
   2,048 states a process (~50 KB each, mostly TextWorld's Action objects), then the cache starts over.
5. A disk leak, not only time: every `PddlEnv` copies Fast Downward's 34 MB `libdownward.so` to a temp folder,
   loads it and deletes the file, but a loaded library is never unloaded, so the deleted copy keeps its disk space
   for the life of the process: a worker that hosts thousands of env loads (the oracle critic plays a fresh env per
   continuation) filled the disk. A closed env now hands its library copy back to a per-process free list and the
   next env takes it (it loads its own SAS task into it, as it would into a new copy), so a worker holds at most
   as many copies as it ever had envs open at once.

`bench/env_steps.py` measures the effect side by side; `tests/test_alfworld_env.py` checks transcripts match.
"""
from __future__ import annotations

import array
import collections
import copy
import functools
import hashlib
import os
import sys
from pathlib import Path

from agentprm.io import atomic_path, user_cache

_installed = False


def sas_cache_dir() -> Path:
    """$AGENTPRM_SAS_CACHE, else <XDG cache>/agentprm/sas."""
    if os.environ.get("AGENTPRM_SAS_CACHE"):
        return Path(os.environ["AGENTPRM_SAS_CACHE"])
    return user_cache("sas")


SAS_SUFFIX = ".v2.sas"   # entries with a checksum line; the header-less ".sas" files of earlier versions are not read


def sas_cache_limit() -> int:
    """Bytes the SAS cache may hold: $AGENTPRM_SAS_CACHE_MB (default 8192)."""
    return int(float(os.environ.get("AGENTPRM_SAS_CACHE_MB", "8192")) * 2 ** 20)


def _read_entry(path: Path) -> str | None:
    """The SAS text of a cache entry whose checksum holds (used: its mtime is bumped for the LRU bound); a corrupt
    entry is removed; None when there is none."""
    try:
        header, _, sas = path.read_text().partition("\n")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):   # unreadable: as corrupt
        header, sas = "", ""
    if header != f"; sha256 {hashlib.sha256(sas.encode()).hexdigest()}":
        path.unlink(missing_ok=True)
        return None
    os.utime(path)
    return sas


def _write_entry(path: Path, sas: str) -> None:
    try:
        with atomic_path(path) as tmp:
            Path(tmp).write_text(f"; sha256 {hashlib.sha256(sas.encode()).hexdigest()}\n{sas}")
        if bound_cache(path.parent, sas_cache_limit()):
            _warn_evicted(path.parent)
    except OSError:  # a read-only cache costs speed, not correctness
        pass


_evicted_warned = False


def _warn_evicted(folder: Path) -> None:
    """Once a process: a run that evicts evicts again, and one line says what to do."""
    global _evicted_warned
    if _evicted_warned:
        return
    _evicted_warned = True
    print(f"warning: SAS cache {folder} reached its bound of {sas_cache_limit() // 2 ** 20} MB and deleted its least "
          "recently used entries; if this run plays more games than it holds, each is translated again (slow): raise "
          "$AGENTPRM_SAS_CACHE_MB", file=sys.stderr, flush=True)


def bound_cache(folder: Path, limit: int) -> int:
    """Delete the least recently used SAS entries (ours only: <sha256>.sas and <sha256>.v2.sas) until the folder's
    entries total at most 90% of `limit` bytes, when they exceed it; returns how many were deleted."""
    entries = []
    for p in folder.iterdir():
        stem = p.name.split(".")[0]
        if len(stem) == 64 and p.name.endswith(".sas") and all(c in "0123456789abcdef" for c in stem):
            try:
                st = p.stat()
            except FileNotFoundError:   # another worker removed it
                continue
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    deleted = 0
    for _, size, p in sorted(entries):
        if total <= 0.9 * limit:
            break
        p.unlink(missing_ok=True)
        total -= size
        deleted += 1
    return deleted


def _translate_via_disk(fast_downward, domain: str, problem: str, verbose: bool, optimize: bool):
    digest = hashlib.sha256("\0".join((domain, problem, str(optimize))).encode()).hexdigest()
    path = sas_cache_dir() / f"{digest}{SAS_SUFFIX}"
    sas = _read_entry(path)
    if sas is not None:
        argv, sys.argv = sys.argv, ["translate.py", "domain", "task"]  # its options module parses argv on import
        try:
            from fast_downward.translate import normalize
            from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions
        finally:
            sys.argv = argv

        task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                            lisp_parser.parse_nested_list(problem.split("\n")))
        normalize.normalize(task)  # what pddl2sas does before translating (the translation leaves task as is)
        return task, sas
    task, sas = fast_downward.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
    _write_entry(path, sas)
    return task, sas


def _copy_context(context: dict) -> dict:
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


def _deep_copied_cache(parse, max_entries: int | None = None):
    """`parse(text, rule_name=...)` cached per (text, rule_name); each call gets its own deep copy, because
    derivation mutates parse trees. Starts over past `max_entries` (None: unbounded)."""
    cache: dict = {}

    def cached(text, rule_name=None, **kwargs):
        key = (text, rule_name)
        if key not in cache:
            if max_entries is not None and len(cache) > max_entries:
                cache.clear()
            cache[key] = parse(text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(cache[key])

    return cached


def install() -> None:
    global _installed
    if _installed:
        return
    from textworld.envs.pddl import logic as tw_logic
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    textgen._parse_and_convert = _deep_copied_cache(textgen._parse_and_convert)
    tw_logic._parse_and_convert = _deep_copied_cache(tw_logic._parse_and_convert, max_entries=16)  # every game embeds the same grammar file
    textgen.copy_context = _copy_context
    Rule.parse_conjunctive_query = classmethod(functools.lru_cache(maxsize=4096)(Rule.parse_conjunctive_query.__func__))

    fast_downward = tw_logic.fast_downward
    sas_cache: dict = {}

    def cached_pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (domain, problem, optimize)
        if key not in sas_cache:
            if len(sas_cache) > 256:  # bounded: one entry per distinct game
                sas_cache.clear()
            sas_cache[key] = _translate_via_disk(fast_downward, domain, problem, verbose, optimize)
        return sas_cache[key]

    class _FastDownward:  # the module, with pddl2sas swapped
        def __getattr__(self, name):
            return cached_pddl2sas if name == "pddl2sas" else getattr(fast_downward, name)

    tw_logic.fast_downward = _FastDownward()
    _cache_admissible_commands()
    _reuse_downward_libraries()
    _installed = True


def _reuse_downward_libraries() -> None:
    """Speed-up 5 (module doc): library copies go back to a free list on close and are reused by the next env."""
    from textworld.envs.pddl import pddl

    module, free = pddl.fast_downward, []

    class _FastDownward:  # the module as PddlEnv sees it, with load_lib served from the free list first
        def __getattr__(self, name):
            if name == "load_lib":
                return lambda: free.pop() if free else module.load_lib()
            return getattr(module, name)

    def close(self) -> None:
        lib, self.downward_lib = getattr(self, "downward_lib", None), None
        if lib is not None:
            free.append(lib)

    pddl.fast_downward = _FastDownward()
    pddl.PddlEnv.close = close


_GATHERED = ("_valid_actions", "_valid_commands", "admissible_commands")
# what `PddlState.apply` reads of an applicable operator; Fast Downward's ctypes struct also holds a 1 KB name
_Operator = collections.namedtuple("_Operator", "id nb_effect_atoms")
MAX_STATES = 2048
_gathered_by_state: dict = {}   # (problem text, its facts as ids) -> (the valid actions' operators, _GATHERED lists)


def _cache_admissible_commands() -> None:
    from textworld.envs.pddl.pddl import PddlEnv

    gather = PddlEnv._gather_infos
    cache = _gathered_by_state
    fact_ids: dict = {}   # problem text -> {fact: small int}

    def cached_gather_infos(self):
        if self.request_infos.policy_commands:   # the planner's plan depends on more than the facts
            return gather(self)
        if len(cache) >= MAX_STATES:   # bounded memory (~50 KB a state); both go, or keys would be renumbered
            cache.clear()
            fact_ids.clear()
        pddl_state = self._pddl_state
        # the facts as sorted small ints: exact, and ~1 KB a key instead of a frozenset's ~30 KB hash table
        ids = fact_ids.setdefault(pddl_state.pddl_problem, {})
        facts = sorted(ids.setdefault(f, len(ids)) for f in pddl_state.facts)
        key = (pddl_state.pddl_problem, array.array("I", facts).tobytes())
        hit = cache.get(key)
        if hit is None:
            gather(self)
            ops = pddl_state._operators   # only the valid actions' operators can be applied
            operators = {a.id: _Operator(a.id, ops[a.id].nb_effect_atoms) for a in self.state["_valid_actions"]}
            cache[key] = (operators, tuple(tuple(self.state[k]) for k in _GATHERED))
            return
        # what the stock method sets, in its order, with the cached lists copied (the caller may mutate them)
        state = self.state
        state["command_templates"] = sorted(set(action.template for action in self._logic.actions.values()))
        state["won"] = pddl_state.check_goal()
        state["lost"] = False
        state["_entity_infos"] = dict(self._entity_infos)
        state["_facts"] = list(pddl_state.facts)
        if self.request_infos.facts:
            state["facts"] = list(map(self._get_human_readable_fact, state["_facts"]))
        state["last_action"] = None
        state["_last_action"] = self._last_action
        pddl_state._operators, lists = hit
        for k, value in zip(_GATHERED, lists):
            state[k] = list(value)
        if self.request_infos.moves:
            state["moves"] = self._moves

    PddlEnv._gather_infos = cached_gather_infos
