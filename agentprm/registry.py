"""The one shape of every registry of pluggable pieces (algorithms, stage-3 updates, PRM losses, model presets): a
name maps to one entry, registered once — a second registration of a name is refused, never a silent replacement —
and looking up a name that is not there is a one-line error listing the known ones."""
from __future__ import annotations

from typing import Generic, TypeVar

from agentprm.errors import UserError

T = TypeVar("T")


class Registry(dict, Generic[T]):
    def __init__(self, what: str):
        super().__init__()
        self.what = what        # "algorithm", "PRM loss", ...: how errors name an entry

    def add(self, name: str, entry: T) -> None:
        if name in self:
            raise ValueError(f"{self.what} {name!r} is registered already")
        self[name] = entry

    def entry(self, name: str) -> T:
        if name not in self:
            raise UserError(f"unknown {self.what} {name!r}; known: {', '.join(self)}")
        return self[name]
