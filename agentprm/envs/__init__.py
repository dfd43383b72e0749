"""Stage 0 — environments. Later stages read envs only through `agentprm.envs.base.TextEnv` and its `Turn`s; the
rollout engine and beam search still construct the ALFWorld env by name (docs/architecture.md)."""
from agentprm.envs.base import TextEnv, Turn

__all__ = ["TextEnv", "Turn"]
