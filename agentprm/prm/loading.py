"""Load any PRM folder the loop or CLI is pointed at: a `ProcessRewardModel` (kind "prm") or PRIME's implicit
PRM. Both expose `score(states, replies)`, which is all Best-of-N, beam search and online DPO need."""
from __future__ import annotations

import json
from pathlib import Path

from agentprm.agent.encoding import CONFIG_FILE


def load_prm(folder: str | Path):
    from agentprm.prm import prime
    from agentprm.prm.model import ProcessRewardModel

    meta = Path(folder) / CONFIG_FILE
    try:
        implicit = meta.is_file() and prime.KEY in json.loads(meta.read_text())
    except json.JSONDecodeError:
        implicit = False   # ProcessRewardModel.load reports the bad file
    return prime.ImplicitPRM.load(folder) if implicit else ProcessRewardModel.load(folder)
