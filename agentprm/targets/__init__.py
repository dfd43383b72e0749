"""Stage-1 targets: Monte-Carlo Q̂(s, a) from rollouts (`mc`) and preference pairs at a state (`pairs`)."""
from agentprm.data.tables import TARGETS_SCHEMA, TableFile, read_targets
from agentprm.data.tables import PAIRS_SCHEMA, read_pairs
from agentprm.targets.mc import mc_targets, targets_from_rollouts
from agentprm.targets.pairs import make_pairs

__all__ = ["PAIRS_SCHEMA", "TARGETS_SCHEMA", "TableFile", "make_pairs", "mc_targets", "read_pairs", "read_targets",
           "targets_from_rollouts"]
