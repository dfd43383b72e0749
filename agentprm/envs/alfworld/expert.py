"""alfworld's hand-coded expert, fixed for pick_two_obj_and_place and made deterministic.

alfworld 0.4.2's `BasePolicy.update_state_tracking` looks for "put" in the last command, but since 0.4.0 the
grammar says "move X to Y" (upstream PR #94; fix proposed in PR #114). Without the fix the expert never empties
its hands and fails every pick-two game. We translate the command for the tracker only; the engine is untouched.

The expert picks among equal objects ("take egg 2" or "egg 3") with the process-global `random` module, whose
state depends on whatever else drew from it — including, through set iteration elsewhere, on PYTHONHASHSEED: 4 of
48 generated games got different demos under two hash seeds. Each expert now draws from its own RNG,
seeded at reset by the game's folder name, so an episode's demo depends on the game alone.
"""
from __future__ import annotations

import random
import zlib
from pathlib import Path

_patched = False


def patch_expert() -> None:
    global _patched
    if _patched:
        return
    from alfworld.agents.expert import handcoded_expert

    track = handcoded_expert.BasePolicy.update_state_tracking

    def update_state_tracking(self, game_state, last_action):
        if last_action.startswith("move "):
            last_action = "put " + last_action[len("move "):]
        return track(self, game_state, last_action)

    handcoded_expert.BasePolicy.update_state_tracking = update_state_tracking

    agent, reset, act = handcoded_expert.HandCodedAgent, handcoded_expert.HandCodedAgent.reset, \
        handcoded_expert.HandCodedAgent.act

    def seeded_reset(self, game="INVALID"):
        self._agentprm_rng = random.Random(zlib.crc32(Path(game).parent.name.encode()))
        return reset(self, game)

    def seeded_act(self, *args, **kwargs):
        # the module's `random` is looked up at call time: lend it this expert's RNG for the call (single-threaded)
        handcoded_expert.random = getattr(self, "_agentprm_rng", random)
        try:
            return act(self, *args, **kwargs)
        finally:
            handcoded_expert.random = random

    agent.reset, agent.act = seeded_reset, seeded_act
    _patched = True


def expert_wrapper():
    patch_expert()
    from alfworld.agents.environment.alfred_tw_env import AlfredExpert, AlfredExpertType

    return AlfredExpert(expert_type=AlfredExpertType.HANDCODED)
