"""Stage-1 targets: Monte-Carlo Q̂(s, a) from rollouts (`mc`) and preference pairs at a state (`pairs`)."""
from agentprm.targets.mc import TARGETS_SCHEMA, TargetsFile, mc_targets, read_targets, targets_from_rollouts
from agentprm.targets.pairs import PAIRS_SCHEMA, make_pairs, read_pairs

__all__ = ["PAIRS_SCHEMA", "TARGETS_SCHEMA", "TargetsFile", "make_pairs", "mc_targets", "read_pairs", "read_targets",
           "targets_from_rollouts"]
