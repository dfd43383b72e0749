"""Import alfworld safely: it creates ~/.cache/alfworld at import unless ALFWORLD_DATA is set, so point that at a
folder we control first (a user's own ALFWORLD_DATA, e.g. the official dataset, is respected)."""
from __future__ import annotations

import os

from agentprm.io import user_cache

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

_CACHE = user_cache("alfworld")


def import_alfworld():
    if "ALFWORLD_DATA" not in os.environ:
        _CACHE.mkdir(parents=True, exist_ok=True)
        os.environ["ALFWORLD_DATA"] = str(_CACHE)
    import alfworld  # noqa: F401  (after ALFWORLD_DATA is set)
    import alfworld.info

    return alfworld
