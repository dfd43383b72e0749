"""alfworld's hand-coded expert, fixed for pick_two_obj_and_place.

alfworld 0.4.2's `BasePolicy.update_state_tracking` looks for "put" in the last command, but since 0.4.0 the
grammar says "move X to Y" (upstream PR #94; fix proposed in PR #114). Without the fix the expert never empties
its hands and fails every pick-two game. We translate the command for the tracker only; the engine is untouched.
"""
from __future__ import annotations

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
    _patched = True


def expert_wrapper():
    patch_expert()
    from alfworld.agents.environment.alfred_tw_env import AlfredExpert, AlfredExpertType

    return AlfredExpert(expert_type=AlfredExpertType.HANDCODED)
