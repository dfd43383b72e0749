"""Test-time search with a critic (a PRM, an implicit PRM, or the simulator oracle — anything with
`score(states, replies)`): Best-of-N per turn (`best_of_n.py`) and beam search over partial episodes (`beam.py`);
critics by name (`critics.py`). The loop, `agentprm eval` and the scripts all search through this package. Names load
on first use: `critics` (what a config names) costs no torch import."""
from agentprm.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "beam_search": "beam", "play_beam": "beam", "BestOfNAgent": "best_of_n", "UniformCritic": "uniform",
})
