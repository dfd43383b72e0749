"""Remove the three things that dominated TextWorld-PDDL step time, with byte-identical transcripts:

1. The TatSu parse of grammar snippets. `PddlEnv` re-parses the same snippets for every admissible command on
   every step; parse trees are cached and deep-copied on the way out because derivation mutates them.
   `Rule.parse_conjunctive_query` (grammar rule conditions) is likewise pure and cached.
2. Fast Downward's PDDL→SAS translation, run twice per `load()` and again per `reset()` for the same problem.
   Cached per (domain, problem, optimize) in memory, and its SAS text on disk (`sas_cache_dir()`, one file per
   sha256 of the key): without the disk cache every new env process translated each game it had not loaded
   before, most of an episode's env time (`bench/env_resets.py` measures a first reset with and without it). A
   disk hit re-parses and normalises the PDDL (the `task` object the engine also needs, a small share of the
   translation's cost) and reads the SAS text. The result is read-only for the engine.
3. Deep copies of the grammar's derivation context. Every admissible command's text is derived anew each step,
   and `textgen.copy_context` deep-copies the context's `variables` (name -> EntityInfo) and `mapping`
   (Placeholder -> Variable) for every symbol: three quarters of a step's time once 1 and 2 are cached. Copying
   the two dicts is enough: derivation adds keys to them (`query`) but never mutates their values (the
   grammar's `{...}` expressions only read attributes, e.g. `{o.indefinite + ' ' + o.name}`, `{r.name or r.id}`).

`bench/env_steps.py` measures the effect side by side; `tests/test_alfworld_env.py` checks transcripts match.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import os
import sys
from pathlib import Path

from agentprm.io import atomic_path

_installed = False


def sas_cache_dir() -> Path:
    """$AGENTPRM_SAS_CACHE, else <XDG cache>/agentprm/sas."""
    if os.environ.get("AGENTPRM_SAS_CACHE"):
        return Path(os.environ["AGENTPRM_SAS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentprm" / "sas"


def _translate_via_disk(fast_downward, domain: str, problem: str, verbose: bool, optimize: bool):
    digest = hashlib.sha256("\0".join((domain, problem, str(optimize))).encode()).hexdigest()
    path = sas_cache_dir() / f"{digest}.sas"
    if path.exists():
        argv, sys.argv = sys.argv, ["translate.py", "domain", "task"]  # its options module parses argv on import
        try:
            from fast_downward.translate import normalize
            from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions
        finally:
            sys.argv = argv

        task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                            lisp_parser.parse_nested_list(problem.split("\n")))
        normalize.normalize(task)  # what pddl2sas does before translating (the translation leaves task as is)
        return task, path.read_text()
    task, sas = fast_downward.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
    try:
        with atomic_path(path) as tmp:
            Path(tmp).write_text(sas)
    except OSError:  # a read-only cache costs speed, not correctness
        pass
    return task, sas


def _copy_context(context: dict) -> dict:
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


def install() -> None:
    global _installed
    if _installed:
        return
    from textworld.envs.pddl import logic as tw_logic
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    parse = textgen._parse_and_convert
    parse_cache: dict = {}

    def cached_parse(text, rule_name=None, **kwargs):
        key = (text, rule_name)
        if key not in parse_cache:
            parse_cache[key] = parse(text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(parse_cache[key])

    textgen._parse_and_convert = cached_parse
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
    _installed = True
