"""The one shape of every registry of pluggable pieces (algorithms, stage-3 updates, PRM losses, model presets): a
name maps to one entry, registered once — a second registration of a name is refused, never a silent replacement —
and looking up a name that is not there is a one-line error listing the known ones. A registry given an entry-point
group (environments, critics) also finds a name a package of someone else's registers: the first lookup of a name it
lacks imports that group's entry point of that name, whose module registers it."""
from __future__ import annotations

from importlib.metadata import entry_points
from typing import Generic, TypeVar

from agentprm.errors import UserError

T = TypeVar("T")


class Registry(dict, Generic[T]):
    def __init__(self, what: str, group: str | None = None):
        super().__init__()
        self.what = what        # "algorithm", "PRM loss", ...: how errors name an entry
        self.group = group      # an entry-point group ("agentprm.envs"): where names registered from outside are found

    def add(self, name: str, entry: T) -> None:
        if name in self:
            raise ValueError(f"{self.what} {name!r} is registered already")
        self[name] = entry

    def knows(self, name: str) -> bool:
        """Whether `name` is registered — after importing its entry point, if the registry has a group."""
        if name not in self and self.group:
            for point in entry_points(group=self.group, name=name):
                point.load()
        return name in self

    def entry(self, name: str) -> T:
        if not self.knows(name):
            raise UserError(f"unknown {self.what} {name!r}; known: {', '.join(self)}")
        return self[name]
