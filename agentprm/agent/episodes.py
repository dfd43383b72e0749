"""An episode encoded once for the losses that read whole episodes (GRPO/SPRO's policy gradient, PRIME's implicit
PRM): token ids per turn with the same prompt encoding as the policy and the PRM, the outcome, the env's rewards and
state keys per turn, and log π_ref of each reply (and log π_old, where π_old — the policy that played the episodes,
π_{i-1} — is not the reference)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch

from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
from agentprm.agent.replay import episode_states
from agentprm.agent.scoring import reply_logprobs
from agentprm.data.trajectories import EpisodeRecord


@dataclass
class EncodedEpisode:
    prompts: list[list[int]]       # one per turn
    replies: list[list[int]]
    outcome: float                 # 1.0 won, else 0.0
    ref_logps: torch.Tensor        # log π_ref(reply|s) per turn
    old_logps: torch.Tensor | None = None   # log π_old(reply|s) per turn, where π_old is not π_ref (else ref_logps)
    rewards: list[float] = field(default_factory=list)   # the env's reward per turn
    anchors: list[str] = field(default_factory=list)     # the state each turn stands in (GiGPO's anchor key)


def anchor_state(step) -> str:
    """GiGPO's anchor key: the state a step stands in as the agent sees it, its observation and admissible commands
    (the observation alone would merge, e.g., every "Nothing happens." of a group; the commands also say what is held
    and where). verl-agent keys by the observation; here both, since ALFWorld's observations repeat across states."""
    return step.observation + "\x00" + "\x00".join(sorted(step.admissible))


def encode_episode(episode: EpisodeRecord, tokenizer, prompt_cfg: PromptConfig) -> EncodedEpisode:
    """Turn by turn, with the one encoding; `ref_logps` stays empty until `add_reference_logprobs`."""
    pairs = list(episode_states(episode))
    return EncodedEpisode(prompts=[prompt_ids(tokenizer, s, prompt_cfg) for s, _ in pairs],
                          replies=[reply_ids(tokenizer, r) for _, r in pairs], outcome=float(episode.won),
                          ref_logps=torch.empty(0), rewards=[float(s.reward) for s in episode.steps],
                          anchors=[anchor_state(s) for s in episode.steps])


@torch.no_grad()
def add_reference_logprobs(episodes: Iterable[EncodedEpisode], reference, pad_id: int,
                           field: str = "ref_logps") -> None:
    """log `reference`(reply|s) of every turn, into each episode's `field` (ref_logps, or old_logps)."""
    episodes = list(episodes)
    for start in range(0, len(episodes), 64):   # all turns of 64 episodes per call: length-bucketed forwards
        chunk = episodes[start:start + 64]
        logps = reply_logprobs(reference, [p for ep in chunk for p in ep.prompts],
                               [r for ep in chunk for r in ep.replies], pad_id).cpu()
        for ep, lp in zip(chunk, torch.split(logps, [len(ep.prompts) for ep in chunk])):
            setattr(ep, field, lp)
