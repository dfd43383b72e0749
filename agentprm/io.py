"""Atomic writes and run provenance: nothing half-written survives a crash; every result says how it was made."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from agentprm.errors import UserError

def user_cache(name: str) -> Path:
    """<$XDG_CACHE_HOME, else ~/.cache>/agentprm/<name>: where agentprm keeps what it can rebuild (games, SAS
    translations, ALFWorld's data, converted models)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentprm" / name


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path in the target's folder; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600; results and shipped files should read like any file
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_leftovers(path: str | os.PathLike) -> list[Path]:
    """The temp files and folders `atomic_path`/`atomic_dir` leave beside `path` when the process is killed inside
    the block (".<name>.<random>.tmp", and ".<name>.<random>.old" of a replace): a whole model copy each."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")
                  and p.name.endswith((".tmp", ".old")))


def read_text(path: str | os.PathLike, max_bytes: int | None = None) -> str:
    """A text file the project reads (configs, manifests, agentprm.json, games): a one-line error if it is not UTF-8,
    not a regular file (a FIFO or a device would block the read or never end it), or larger than `max_bytes`."""
    if Path(path).exists() and not Path(path).is_file():
        raise UserError(f"{path}: not a regular file")
    if max_bytes is not None and Path(path).stat().st_size > max_bytes:
        raise UserError(f"{path}: {Path(path).stat().st_size:,} bytes, more than the {max_bytes:,} such a file may "
                        "have")
    try:
        return Path(path).read_text()
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def parse_json(text: str | bytes, where: object) -> Any:
    """`json.loads(text)`, or a one-line error naming `where` (a file, a file:line): bad JSON, a number past Python's
    4,300-digit limit, or nesting deeper than the parser's stack — the one place every JSON reader bounds them."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError:
        raise UserError(f"{where}: not valid JSON (not UTF-8)") from None
    except ValueError as e:   # int('9' * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        raise UserError(f"{where}: not valid JSON ({str(e).split(':')[0]})") from None
    except RecursionError:
        raise UserError(f"{where}: not valid JSON (nested too deeply)") from None


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(config: dict | None = None, seed: int | None = None) -> dict:
    """What a results file records so a number can be traced back: config, seed, versions, git revision."""
    versions = {}
    for pkg in ("agentprm", "torch", "transformers", "tokenizers", "alfworld", "textworld", "pyarrow"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return {"config": config or {}, "seed": seed, "versions": versions, "python": sys.version.split()[0],
            "platform": platform.platform(), "git_revision": git_revision(), "argv": sys.argv}
