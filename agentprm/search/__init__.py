"""Test-time search with a critic (a PRM, an implicit PRM, or the simulator oracle — anything with
`score(states, replies)`): Best-of-N per turn (`best_of_n.py`) and beam search over partial episodes (`beam.py`).
The loop, `agentprm eval` and the scripts all search through this package."""
from agentprm.search.beam import beam_search, play_beam
from agentprm.search.best_of_n import BestOfNAgent
from agentprm.search.uniform import UniformCritic

__all__ = ["BestOfNAgent", "UniformCritic", "beam_search", "play_beam"]
