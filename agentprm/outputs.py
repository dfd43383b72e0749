"""What agentprm may write, replace and delete: ownership by proof, checked output paths, one writer per output.

The rule (docs/trust-and-failures.md): agentprm replaces or deletes only what it recorded writing.

- A folder agentprm creates holds `.agentprm-owned.json`: its kind, a random id, and — for a folder written whole
  (a model, a task folder) — the manifest of every file it wrote with its size and modification time, signed with a
  key only agentprm holds (`owner_key`, outside any output), so that a marker anyone writes to match a user's files
  proves nothing. Such a folder may be replaced only while its signature holds and its contents still match that
  manifest: a file someone added, or changed since, makes it the user's, and the replace is refused naming that file.
  A folder that grows (a run, rollout shards) records no manifest: agentprm continues it, never deletes in it what it
  did not record (loop/stages.py keeps the records).
- An existing folder without the marker is not agentprm's: an output there is refused, whatever its file names are
  (a copied `agentprm.json` proves nothing).
- An output file must be a regular file or absent; one that exists and that agentprm did not write (a Parquet file
  without agentprm's schema metadata, a JSON file without its provenance) is replaced only with `--overwrite`.
- No output may be one of the command's inputs, lie inside one, or hold one.
- Every output is locked for the command's life (`hold_lock`): a second writer is refused before it changes anything.

Commands declare their outputs and inputs (`declare`); `cli.main` checks all of them and takes the locks before any
work (`prepared`).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

from agentprm.errors import UserError
from agentprm.io import umask, write_json

OWNER_FILE = ".agentprm-owned.json"
KINDS = ("model", "tasks", "shards", "run")   # model/tasks: written whole, with a manifest; shards/run: grow
WHOLE = ("model", "tasks")


# ----------------------------------------------------------------------------------------------- owned folders
def _files(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything below `folder` but folders and the owner file."""
    for root, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            if rel != OWNER_FILE:
                yield rel, path.lstat()


_KEYS: dict[Path, bytes] = {}


def owner_key() -> bytes:
    """This user's secret that signs the manifests of agentprm's folders: <$XDG_STATE_HOME, else ~/.local/state>/
    agentprm/owner.key (0600), made once, atomically. Where it cannot be written (a read-only home), a key for this
    process alone: its folders are then replaceable by this process only — the safe side."""
    path = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "agentprm" / "owner.key"
    if path not in _KEYS:
        try:
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".owner.key.{uuid.uuid4().hex}.tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_hex(32))
                try:
                    os.link(tmp, path)   # the first writer wins; every process then reads the same key
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink()
            key = path.read_text().strip().encode()
        except OSError:
            key = b""
        _KEYS[path] = key if len(key) >= 32 else secrets.token_hex(32).encode()
    return _KEYS[path]


def _signature(record: dict) -> str:
    body = json.dumps({k: record.get(k) for k in ("kind", "id", "files")}, sort_keys=True, separators=(",", ":"))
    return hmac.new(owner_key(), body.encode(), hashlib.sha256).hexdigest()


def mark_owned(folder: str | Path, kind: str) -> None:
    """Record `folder` as agentprm's: for a folder written whole, with the signed manifest of what is in it now."""
    folder = Path(folder)
    files = {rel: [st.st_size, st.st_mtime_ns] for rel, st in _files(folder)} if kind in WHOLE else None
    record = {"owner": "agentprm", "kind": kind, "id": uuid.uuid4().hex,
              "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
    if kind in WHOLE:
        record["signature"] = _signature(record)
    write_json(folder / OWNER_FILE, record)


def owner_record(folder: str | Path) -> dict | None:
    """The folder's owner record, or None where there is none or it is not one agentprm wrote."""
    path = Path(folder) / OWNER_FILE
    if path.is_symlink() or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(record, dict) and record.get("owner") == "agentprm" and record.get("kind") in KINDS):
        return None
    files = record.get("files")
    if record["kind"] in WHOLE and not (isinstance(files, dict) and all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v) for v in files.values())
            and isinstance(record.get("signature"), str)
            and hmac.compare_digest(record["signature"], _signature(record))):
        return None   # a manifest without agentprm's signature (forged, or another user's) proves nothing
    return record


def foreign_file(folder: Path, record: dict) -> str | None:
    """The first path in a folder written whole that its manifest does not account for, said why; None if none."""
    files = record["files"]
    for rel, st in _files(folder):
        if not stat.S_ISREG(st.st_mode):
            return f"{rel} (not a regular file)"
        if rel not in files:
            return f"{rel}, which agentprm did not write"
        if files[rel] != [st.st_size, st.st_mtime_ns]:
            return f"{rel}, changed since agentprm wrote it"
    return None


def _refuse_non_folder(path: Path, flag: str) -> None:
    if path.is_symlink():
        raise UserError(f"{flag}{path}: is a symbolic link; name the folder itself")
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag}{path}: exists and is not a folder; refusing to replace it (choose another path)")
    _refuse_under_file(path, flag)


def _refuse_under_file(path: Path, flag: str) -> None:
    for parent in path.absolute().parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise UserError(f"{flag}{path}: {parent} is a file, not a folder")
            return


def check_replaceable(path: str | os.PathLike, flag: str = "") -> None:
    """A UserError unless `path` is absent, an empty folder, or a folder agentprm wrote whole whose contents still
    match its manifest: an output folder replaces only what the project wrote, never a user's files."""
    path = Path(path)
    _refuse_non_folder(path, flag)
    if not path.exists() or not any(path.iterdir()):
        return
    record = owner_record(path)
    if record is None or record["kind"] not in WHOLE:
        raise UserError(f"{flag}{path}: a non-empty folder agentprm did not write (no {OWNER_FILE} manifest signed "
                        "by this user's agentprm); refusing to replace it (choose another output path, or empty it "
                        "yourself)")
    foreign = foreign_file(path, record)
    if foreign:
        raise UserError(f"{flag}{path}: holds {foreign}; refusing to replace the folder (choose another output "
                        "path, or move that file out)")


def check_claimable(path: str | os.PathLike, kind: str, flag: str = "") -> bool:
    """A folder that grows (a run, rollout shards) may be written into when absent or empty (True), or when agentprm
    created it for the same kind (False); anything else is a UserError. Reads only."""
    path = Path(path)
    _refuse_non_folder(path, flag)
    if not path.exists() or not any(path.iterdir()):
        return True
    record = owner_record(path)
    if record is None:
        raise UserError(f"{flag}{path}: a non-empty folder agentprm did not create (no {OWNER_FILE}); refusing to "
                        "write into it (choose a new or empty folder)")
    if record["kind"] != kind:
        raise UserError(f"{flag}{path}: an agentprm {record['kind']} folder, not a {kind} folder; choose another")
    return False


def claim_folder(path: str | os.PathLike, kind: str, flag: str = "") -> None:
    """`check_claimable`, then a new or empty folder is created and marked as agentprm's."""
    if check_claimable(path, kind, flag):
        Path(path).mkdir(parents=True, exist_ok=True)
        mark_owned(path, kind)


@contextmanager
def atomic_dir(path: str | Path, kind: str = "model") -> Iterator[Path]:
    """Yield a temp folder beside `path`; on success it is marked as agentprm's (with its manifest) and replaces
    `path` — which must be absent, empty, or a folder agentprm wrote (`check_replaceable`, before and after)."""
    path = Path(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        mark_owned(tmp, kind)
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes 0700
        check_replaceable(path)   # the block may have run for an hour: someone may have put files there since
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ output files
def file_kind(path: Path) -> str:
    """What an agentprm-written file is — "page" (view/page.py's HTML), "trajectories", "targets", "pairs" or "table"
    (Parquet with agentprm's schema metadata, told apart by their columns), "layout" (the layout prior), "results"
    (a loop's results.json) or "summary" (a JSON object with agentprm's provenance) — or "" when agentprm did not
    write it."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            if b"agentprm" not in (schema.metadata or {}):
                return ""
            names = set(schema.names)
            return ("trajectories" if {"observation", "turn"} <= names else "pairs" if "chosen" in names
                    else "targets" if {"q", "state_key"} <= names else "table")
        if path.suffix == ".html":
            with path.open("rb") as f:
                return "page" if b'<meta name="generator" content="agentprm ' in f.read(4096) else ""
        if path.stat().st_size > 64 << 20:
            return ""
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            return ""
        if data.get("kind") == "alfworld-layout-prior":
            return "layout"
        if isinstance(data.get("provenance"), dict) and "agentprm" in (data["provenance"].get("versions") or {}):
            return "results" if {"rows", "comparisons", "config"} <= set(data) else "summary"
    except Exception:   # unreadable, not Parquet, not JSON: not ours
        return ""
    return ""


def written_by_agentprm(path: Path) -> bool:
    return bool(file_kind(path))


def owning_folder(path: Path) -> Path | None:
    """The nearest folder above `path` that agentprm created as an output (it holds OWNER_FILE), or None."""
    for folder in Path(path).absolute().parents:
        if (folder / OWNER_FILE).is_file():
            return folder
    return None


BESIDE_OUTPUTS = ("page", "summary")   # kinds a command may rewrite inside an output's folder (RUN/view.html, --json)


def check_output_file(path: str | os.PathLike, flag: str = "", overwrite: bool = False, kind: str = "") -> None:
    """A file output: a regular file or absent. An existing one is replaced only when agentprm wrote it as the same
    kind of output (`kind`, when the command declares one), or with `overwrite`; a file inside another output's
    folder (a run, a model, a rollout folder) never, `overwrite` or not, but a viewer page or a --json summary
    rewritten by the same kind (BESIDE_OUTPUTS)."""
    if str(path) == "":
        raise UserError(f"{flag}: an empty path; name a file")
    path = Path(path)
    if path.is_symlink():
        raise UserError(f"{flag}{path}: is a symbolic link; name the file itself")
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise UserError(f"{flag}{path}: is a folder; name a file")
        if not stat.S_ISREG(mode):
            raise UserError(f"{flag}{path}: is not a regular file (a device, FIFO or socket); name a file")
        found, owner = file_kind(path), owning_folder(path)
        if owner is not None and not (kind in BESIDE_OUTPUTS and found == kind):
            raise UserError(f"{flag}{path}: a file of the agentprm output {owner}"
                            + (f" (a {found})" if found else "") + "; write elsewhere")
        if not overwrite and not found:
            raise UserError(f"{flag}{path}: exists and agentprm did not write it; pass --overwrite to replace it, "
                            "or choose another path")
        if not overwrite and kind and found != kind:
            raise UserError(f"{flag}{path}: a {found} file agentprm wrote, not a {kind}; pass --overwrite to replace "
                            "it, or choose another path")
    _refuse_under_file(path, flag)


# ------------------------------------------------------------------------------------------------------- locks
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's live process
        return True
    return True


@contextmanager
def hold_lock(lock: Path, what: str | os.PathLike) -> Iterator[None]:
    """One writer for `what`: the lock file records the holder's pid and host; a second process is refused with a
    one-line error while the holder lives, and a lock whose process is gone (killed with -9) is taken over. Folders
    made to hold the lock (an output's missing parents) are removed again if they are still empty at the end: a
    refused or failed command leaves no trace."""
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]   # deepest first
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        _take(lock, what)
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
    finally:
        for folder in made:
            try:
                folder.rmdir()   # only while empty: an output written there keeps it
            except OSError:
                break


def _take(lock: Path, what: str | os.PathLike) -> None:
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if lock.is_symlink() or not lock.is_file():   # a FIFO would block the read; neither is a lock of ours
                raise UserError(f"{what}: {lock} is in the way of its lock file and is not one agentprm wrote (not a "
                                "regular file); remove it, or write the output elsewhere") from None
            try:
                holder = json.loads(lock.read_text())
            except (OSError, ValueError):
                holder = {}
            if not isinstance(holder, dict):
                holder = {}
            if holder.get("host") not in (None, me["host"]) or (holder.get("pid") and _alive(holder["pid"])):
                raise UserError(f"{what}: in use by process {holder.get('pid')} on {holder.get('host')} "
                                f"({lock}); wait for it, or remove the lock if that process is gone") from None
            lock.unlink(missing_ok=True)   # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return
    raise UserError(f"{what}: could not take the lock {lock}")


def launch_env() -> tuple[int, int]:
    """($RANK, $WORLD_SIZE) as a data-parallel launcher sets them — (0, 1) outside one — or a one-line error for
    values no launcher sets (a rank that is not a number, or not below the number of processes)."""
    values = {}
    for name, default in (("RANK", "0"), ("WORLD_SIZE", "1")):
        raw = os.environ.get(name, default).strip() or default
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6):
            raise UserError(f"${name}={raw[:20]!r}: must be a whole number (a data-parallel launcher sets it; "
                            "unset it otherwise)")
        values[name] = int(raw)
    rank, size = values["RANK"], values["WORLD_SIZE"]
    if not 0 <= rank < size:
        raise UserError(f"$RANK={rank} with $WORLD_SIZE={size}: a rank must be below the number of processes "
                        "(a data-parallel launcher sets both; unset them otherwise)")
    return rank, size


MAX_NAME = 200   # bytes of an output's name: "." + name + ".agentprm-lock" (or a temporary name) stays within 255


def lock_beside(path: Path) -> Path:
    """The lock of an output path: a hidden file beside it (a folder written whole is swapped, so not inside)."""
    return path.absolute().parent / f".{path.name}.agentprm-lock"


# ------------------------------------------------------------------------------------------ what commands declare
def declare(parser, outputs: dict[str, str] | None = None, inputs: tuple[str, ...] = ()) -> None:
    """Record a command's outputs (flag dest -> "file" or a folder kind) and inputs (flag dests) for `prepared`."""
    parser.set_defaults(_outputs={**(parser.get_default("_outputs") or {}), **(outputs or {})},
                        _inputs=(*(parser.get_default("_inputs") or ()), *inputs))


def _flag(dest: str) -> str:
    return f"--{dest.replace('_', '-')} "


def _paths(value: Any) -> list[Path]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [Path(v) for v in values if isinstance(v, (str, os.PathLike)) and str(v)]


def overlaps(a: Path, b: Path) -> bool:
    """`a` and `b` are the same path, or one lies inside the other."""
    a, b = Path(os.path.realpath(a)), Path(os.path.realpath(b))
    return a == b or a in b.parents or b in a.parents


@contextmanager
def prepared(args) -> Iterator[None]:
    """Check every declared output of a parsed command before any work, then hold its lock for the command's life.
    Run folders are locked by the loop itself (loop/stages.py `run_lock`) once it has claimed them."""
    outputs = {dest: kind for dest, kind in (getattr(args, "_outputs", None) or {}).items()
               if getattr(args, dest, None) is not None}
    inputs = [(dest, p) for dest in getattr(args, "_inputs", None) or () for p in _paths(getattr(args, dest, None))]
    overwrite = bool(getattr(args, "overwrite", False))
    paths: dict[str, Path] = {}
    for dest, kind in outputs.items():
        value = getattr(args, dest)
        if str(value) == "":
            raise UserError(f"{_flag(dest).strip()}: an empty path; name a {'file' if kind == 'file' else 'folder'}")
        path = paths[dest] = Path(value)
        if len(os.fsencode(path.name)) > MAX_NAME:
            raise UserError(f"{_flag(dest)}{path.name[:40]}...: a name of {len(os.fsencode(path.name))} bytes; at most "
                            f"{MAX_NAME} (file systems allow 255, and agentprm writes its lock and temporary files "
                            "beside an output under a longer name)")
        for other, inp in inputs:
            if inp.exists() and overlaps(path, inp):
                raise UserError(f"{_flag(dest)}{path}: is, holds or lies inside the input {_flag(other)}{inp}; "
                                "write the output elsewhere")
        for other, done in paths.items():
            if other != dest and overlaps(path, done) and {outputs[other].partition(":")[0], kind.partition(":")[0]} != {"run", "file"}:
                # (a summary may go in a run folder, not in a folder written whole)
                raise UserError(f"{_flag(dest)}{path}: overlaps {_flag(other)}{done}; give each output its own path")
        if kind == "file" or kind.startswith("file:"):   # "file:<kind>": replaces only a file of that kind
            check_output_file(path, _flag(dest), overwrite, kind.partition(":")[2])
        elif kind in WHOLE:
            check_replaceable(path, _flag(dest))
        else:
            check_claimable(path, kind, _flag(dest))
    with ExitStack() as stack:
        # a data-parallel launch (accelerate, torchrun) runs the command once per process: rank 0 writes, and locks
        writer = launch_env()[0] == 0
        for dest, path in paths.items():
            if outputs[dest] != "run" and writer:
                stack.enter_context(hold_lock(lock_beside(path), path))
        yield
