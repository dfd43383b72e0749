"""ALFWorld on the real TextWorld engine, from `pip install alfworld` alone (no dataset download).

- `engine`: the `AlfWorldEnv` adapter (TextEnv protocol) and the step-speed caches.
- `tasks`: the task catalogue: generated games (`tasks.jsonl`) or official ALFWorld data laid out as upstream.
- `generate`: ALFWorld games of all six task types generated from the floor plans that alfworld ships.
- `expert`: alfworld's hand-coded expert, with the pick-two fix.
"""
from agentprm.envs.alfworld.setup import TASK_TYPES, import_alfworld

__all__ = ["TASK_TYPES", "import_alfworld"]
