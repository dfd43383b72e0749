"""The algorithms the loop can run, one module each, registered by importing this package (the registry and what an
entry owns: loop/algos/registry.py). Registration order is the order listed in errors."""
from agentprm.loop.algos.registry import (ALGORITHMS, POLICY_UPDATE_FIELDS, Algorithm, IterationContext,
                                          IterationResult, check_algorithm, get_algorithm, register_algorithm)
from agentprm.loop.algos import agentprm, inverse_prm, prime, grpo, spro, gigpo, sft  # noqa: E402,F401  (register)

__all__ = ["ALGORITHMS", "POLICY_UPDATE_FIELDS", "Algorithm", "IterationContext", "IterationResult", "check_algorithm",
           "get_algorithm", "register_algorithm"]
