"""Rebuild the agent's states from stored trajectories: SFT, Q-targets and PRM training all learn from
(state, reply) pairs read back from Parquet, so they must see exactly the states the agent saw."""
from __future__ import annotations

from typing import Iterator

from agentprm.agent.format import parse_reply
from agentprm.agent.state import AgentState
from agentprm.data.trajectories import EpisodeRecord
from agentprm.envs.base import Turn


def episode_states(episode: EpisodeRecord) -> Iterator[tuple[AgentState, str]]:
    """(state before the step, reply) for every step of an episode, in order."""
    state, prev = None, None
    for step in episode.steps:
        turn = Turn(task=episode.task, observation=step.observation, admissible=tuple(step.admissible))
        if prev is None:
            state = AgentState.start(turn, episode.task_id)
        else:  # the env received the parsed command, so the state advances by it
            state = state.advance(parse_reply(prev.action)[1], turn)
        yield state, step.action
        prev = step
