"""The agent's view of an episode: `AgentState` (memory folded from turns) and the prompt/reply format that the
policy and the PRM share."""
from agentprm.agent.format import format_reply, parse_reply, state_to_messages
from agentprm.agent.state import AgentState, Goal, parse_goal

__all__ = ["AgentState", "Goal", "format_reply", "parse_goal", "parse_reply", "state_to_messages"]
