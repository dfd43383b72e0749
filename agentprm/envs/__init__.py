"""Stage 0 — environments. Later stages read envs only through `agentprm.envs.base.TextEnv` and its `Turn`s, and
build them by name through `agentprm.envs.registry` (a `TaskSpec`'s `env`: ALFWorld by default)."""
from agentprm.envs.base import TaskSpec, TextEnv, Turn

__all__ = ["TaskSpec", "TextEnv", "Turn"]
