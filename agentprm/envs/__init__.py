"""Stage 0 — environments. Every later stage talks to an env only through `agentprm.envs.base.TextEnv`."""
from agentprm.envs.base import TextEnv, Turn

__all__ = ["TextEnv", "Turn"]
