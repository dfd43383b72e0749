"""Package names that load on first use (PEP 562): a package's `__init__` re-exports its public names without
importing torch or transformers, so configs, `--help` and the model-free commands start in well under a second."""
from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], list[str]]:
    """`__getattr__` and `__all__` for `package`, given name -> module (absolute, or relative to the package)."""
    def getattr_(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = homes[name]
        return getattr(importlib.import_module(home if home.startswith("agentprm.") else f"{package}.{home}"), name)

    return getattr_, sorted(homes)
