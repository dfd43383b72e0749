"""agentprm: process reward models for multi-turn LLM agents (AgentPRM, arXiv 2502.10325, and neighbours)."""

__version__ = "0.1.0"
