"""Memoise the two things that dominate TextWorld-PDDL step time, with byte-identical transcripts:

1. The TatSu parse of grammar snippets. `PddlEnv` re-parses the same snippets for every admissible command on
   every step; parse trees are cached and deep-copied on the way out because derivation mutates them.
   `Rule.parse_conjunctive_query` (grammar rule conditions) is likewise pure and cached.
2. Fast Downward's PDDL→SAS translation, run twice per `load()` and again per `reset()` for the same problem.
   Cached per (domain, problem, optimize); the result is read-only for the engine.

`bench/env_steps.py` measures the effect side by side; `tests/test_alfworld_env.py` checks transcripts match.
"""
from __future__ import annotations

import copy
import functools

_installed = False


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
    Rule.parse_conjunctive_query = classmethod(functools.lru_cache(maxsize=4096)(Rule.parse_conjunctive_query.__func__))

    fast_downward = tw_logic.fast_downward
    sas_cache: dict = {}

    def cached_pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (domain, problem, optimize)
        if key not in sas_cache:
            if len(sas_cache) > 256:  # bounded: one entry per distinct game
                sas_cache.clear()
            sas_cache[key] = fast_downward.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
        return sas_cache[key]

    class _FastDownward:  # the module, with pddl2sas swapped
        def __getattr__(self, name):
            return cached_pddl2sas if name == "pddl2sas" else getattr(fast_downward, name)

    tw_logic.fast_downward = _FastDownward()
    _installed = True
