"""Nothing the user owns is ever lost (agentprm/outputs.py): agentprm replaces or deletes only what it
recorded writing, refuses output paths that are not plain files or folders it owns, and locks every output.

Each case runs the real CLI and compares a checksum of the user's tree before and after: a refused command exits 2
with one line and changes nothing."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentprm.cli import main
from agentprm.errors import UserError
from agentprm.outputs import OWNER_FILE, atomic_dir, check_replaceable, claim_folder, lock_beside
from conftest import tree


def refused(argv: list[str], capsys, message: str) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and message in err, err
    return err


@pytest.fixture
def users_folder(tmp_path) -> Path:
    """A folder of the user's that looks like agentprm's by its file names (the hostile battery's cases)."""
    mine = tmp_path / "mine"
    for rel, text in {"agentprm.json": "{}", "thesis.tex": "\\section{Results}", "config.yaml": "my: config\n",
                      "report.md": "# my report\n", "tasks/train/my_notes.txt": "notes",
                      "policy_0/weights_i_trained.bin": "weights", ".stages/policy_0.done": "{}"}.items():
        (mine / rel).parent.mkdir(parents=True, exist_ok=True)
        (mine / rel).write_text(text)
    return mine


@pytest.mark.parametrize("argv", [
    ["sft", "--demos", "d.parquet", "--out", "{mine}"],
    ["train-prm", "--targets", "t.parquet", "--init", "tiny", "--out", "{mine}"],
    ["train-policy", "--policy", "p", "--prm", "q", "--rollouts", "r", "--out", "{mine}"],
    ["loop", "--config", "configs/quickstart.yaml", "--run-dir", "{mine}"],
    ["loop", "--config", "configs/quickstart.yaml", "--run-dir", "{mine}", "--resume"],
    ["quickstart", "--out", "{mine}"],
    ["quickstart", "--out", "{mine}", "--resume"],
    ["rollout", "--policy", "random", "--tasks", "t", "--out", "{mine}"],
    ["tasks", "generate", "--out", "{mine}", "--split", "train", "--num", "1", "--force"],
    ["tasks", "generate", "--out", "{mine}/tasks/train", "--split", "train", "--num", "1", "--force"],
])
def test_a_users_folder_is_never_an_output(users_folder, capsys, argv):
    """A copied agentprm.json, stage-like paths (tasks/train, policy_0, .stages) and a run's file names prove
    nothing: every command refuses the folder before any work, and leaves it byte for byte as it was."""
    before = tree(users_folder)
    refused([a.format(mine=users_folder) for a in argv], capsys, "agentprm did not")
    assert tree(users_folder) == before


def test_a_model_folder_is_replaced_only_while_it_matches_its_manifest(tmp_path):
    out = tmp_path / "model"
    with atomic_dir(out) as tmp:
        (tmp / "weights.bin").write_bytes(b"w1")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.txt").write_text("a")
    record = json.loads((out / OWNER_FILE).read_text())
    assert record["kind"] == "model" and sorted(record["files"]) == ["sub/a.txt", "weights.bin"]
    with atomic_dir(out) as tmp:   # its own output, untouched since: replaced whole
        (tmp / "weights.bin").write_bytes(b"w2")
    assert (out / "weights.bin").read_bytes() == b"w2" and not (out / "sub").exists()

    (out / "thesis.tex").write_text("mine")   # a file someone added
    with pytest.raises(UserError, match="thesis.tex, which agentprm did not write"):
        check_replaceable(out)
    (out / "thesis.tex").unlink()
    (out / "weights.bin").write_bytes(b"edited")   # a file someone changed
    with pytest.raises(UserError, match="weights.bin, changed since agentprm wrote it"):
        with atomic_dir(out):
            pass
    assert (out / "weights.bin").read_bytes() == b"edited"
    os.symlink("/etc/hostname", out / "link")
    with pytest.raises(UserError, match="not a regular file"):
        check_replaceable(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]   # no temp folder left by a refused replace


def test_a_forged_ownership_marker_does_not_make_a_users_folder_agentprms(tmp_path, monkeypatch):
    """A marker anyone can write — the user's own files, their sizes and mtimes, in agentprm's format — let `sft --out
    mine` delete them. Ownership rests on a key only agentprm holds (outside the folder), not on data to match."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    st = (mine / "thesis.tex").stat()
    forged = {"owner": "agentprm", "kind": "model", "id": "0" * 32, "created": "2026-01-01T00:00:00+0000",
              "files": {"thesis.tex": [st.st_size, st.st_mtime_ns]}}
    (mine / OWNER_FILE).write_text(json.dumps(forged))
    with pytest.raises(UserError, match="did not write"):
        check_replaceable(mine)
    assert main(["sft", "--demos", "d.parquet", "--out", str(mine)]) == 2
    assert (mine / "thesis.tex").read_text() == "years of work"
    # a marker agentprm wrote, copied over another folder's files, proves nothing there either
    theirs = tmp_path / "model"
    with atomic_dir(theirs) as tmp:
        (tmp / "thesis.tex").write_text("x" * st.st_size)
    record = json.loads((theirs / OWNER_FILE).read_text())
    record["files"]["thesis.tex"][1] = st.st_mtime_ns   # the user's mtime in agentprm's signed record
    (mine / OWNER_FILE).write_text(json.dumps(record))
    with pytest.raises(UserError, match="did not write"):
        check_replaceable(mine)
    check_replaceable(theirs)   # agentprm's own folder, untouched: still its to replace


def test_a_model_folder_changed_during_the_block_is_kept(tmp_path):
    """The replace is checked again after the (hours-long) block: a file added meanwhile keeps the folder."""
    out = tmp_path / "model"
    with atomic_dir(out) as tmp:
        (tmp / "w").write_text("1")
    with pytest.raises(UserError, match="late.txt"):
        with atomic_dir(out) as tmp:
            (tmp / "w").write_text("2")
            (out / "late.txt").write_text("added while training")
    assert (out / "w").read_text() == "1" and (out / "late.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_output_files_that_are_not_plain_files_are_refused(tmp_path, capsys):
    """As root, `--json /dev/full` replaced the device with a file; FIFOs and symlinks were replaced too; an empty
    path wrote into the current folder; a path under a file was a traceback."""
    fifo, target, link, a_file = tmp_path / "fifo", tmp_path / "target.json", tmp_path / "link.json", tmp_path / "f"
    os.mkfifo(fifo)
    target.write_text("{}")
    os.symlink(target, link)
    a_file.write_text("x")
    base = ["targets", "pairs", "--targets", str(tmp_path / "t.parquet")]
    before = tree(tmp_path)
    refused(base + ["--out", str(tmp_path / "p.parquet"), "--json", str(fifo)], capsys, "not a regular file")
    refused(base + ["--out", str(tmp_path / "p.parquet"), "--json", str(link)], capsys, "symbolic link")
    refused(base + ["--out", ""], capsys, "empty path")
    refused(base + ["--out", str(a_file / "p.parquet")], capsys, f"{a_file} is a file")
    refused(base + ["--out", str(tmp_path)], capsys, "is a folder")
    refused(["sft", "--demos", "d", "--out", str(a_file / "pi")], capsys, f"{a_file} is a file")
    assert tree(tmp_path) == before


def test_an_output_is_never_an_input(tmp_path, capsys, tiny_policy):
    shard = tmp_path / "rollouts" / "part-00000.parquet"
    shard.parent.mkdir()
    shard.write_bytes(b"PAR1")
    before = tree(tmp_path)
    refused(["targets", "mc", "--rollouts", str(shard), "--out", str(shard)], capsys, "input --rollouts")
    refused(["targets", "mc", "--rollouts", str(shard.parent), "--out", str(shard.parent / "t.parquet")], capsys,
            "input --rollouts")
    refused(["train-prm", "--targets", "t.parquet", "--init", str(tiny_policy), "--out", str(tiny_policy)], capsys,
            "input --init")
    refused(["targets", "mc", "--rollouts", str(shard), "--out", str(tmp_path / "t.parquet"),
             "--json", str(tmp_path / "t.parquet")], capsys, "overlaps")
    assert tree(tmp_path) == before


def test_a_users_file_is_replaced_only_with_overwrite(generated_tasks, tmp_path, capsys):
    summary = tmp_path / "summary.json"
    summary.write_text('{"mine": true}')
    eval_argv = ["eval", "--policy", "random", "--tasks", str(generated_tasks.eval), "--max-steps", "2",
                 "--workers", "1", "--json", str(summary)]
    before = tree(tmp_path)
    refused(eval_argv, capsys, "--overwrite")
    assert tree(tmp_path) == before
    assert main(eval_argv + ["--overwrite"]) == 0
    assert json.loads(summary.read_text())["episodes"] == 6
    assert main(eval_argv) == 0   # agentprm's own summary: replaced without the flag
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]   # and no lock left beside it


@pytest.fixture
def live_holder():
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield holder.pid
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("argv, out", [
    (["rollout", "--policy", "random", "--tasks", "{tasks}", "--out", "{out}"], "rollouts"),
    (["demos", "--tasks", "{tasks}", "--out", "{out}"], "demos.parquet"),
    (["tasks", "generate", "--split", "train", "--num", "1", "--out", "{out}"], "games"),
    (["sft", "--demos", "d.parquet", "--out", "{out}"], "pi"),
    (["train-prm", "--targets", "t.parquet", "--init", "tiny", "--out", "{out}"], "prm"),
    (["targets", "mc", "--rollouts", "r", "--out", "{out}"], "t.parquet"),
])
def test_every_writer_holds_a_lock_on_its_output(generated_tasks, tmp_path, capsys, live_holder, argv, out):
    """Two `rollout` runs into one --out both exited 0 and one's episodes were lost; two `sft` runs raced. A second
    writer is refused while the first lives, before it writes anything."""
    out = tmp_path / out
    lock = lock_beside(out)
    lock.write_text(json.dumps({"pid": live_holder, "host": socket.gethostname()}))
    before = tree(tmp_path)
    refused([a.format(tasks=generated_tasks.train, out=out) for a in argv], capsys, f"in use by process {live_holder}")
    assert tree(tmp_path) == before


def test_a_resume_refused_by_the_lock_leaves_the_run_as_it_was(tmp_path, capsys, live_holder):
    """`loop --resume` refused by the run lock had already rewritten the run's config.yaml."""
    from agentprm.loop.config import LoopConfig, dump_config

    run, config = tmp_path / "run", tmp_path / "c.yaml"
    claim_folder(run, "run")
    config.write_text(dump_config(LoopConfig()))
    (run / "config.yaml").write_text(dump_config(LoopConfig()))
    (run / ".stages").mkdir()
    (run / ".stages" / "lock.json").write_text(json.dumps({"pid": live_holder, "host": socket.gethostname()}))
    before = tree(run)
    refused(["loop", "--config", str(config), "--run-dir", str(run), "--resume"], capsys, "in use by process")
    assert tree(run) == before


def test_a_stage_deletes_only_what_it_recorded_writing(tmp_path):
    """Inside agentprm's own run folder, a file at a stage's output path that the stage did not write is kept."""
    from agentprm.loop.stages import StageRunner

    claim_folder(tmp_path / "run", "run")
    runner = StageRunner(tmp_path / "run", resume=True)
    (tmp_path / "run" / "prm").mkdir()
    (tmp_path / "run" / "prm" / "mine.txt").write_text("mine")
    with pytest.raises(UserError, match="agentprm did not write it"):
        runner.run("prm", "prm", lambda out: out.mkdir())
    assert (tmp_path / "run" / "prm" / "mine.txt").read_text() == "mine"

    def killed(out: Path) -> None:   # a stage interrupted after it started writing
        out.mkdir()
        (out / "half").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run("eval", "eval", killed)
    assert runner.run("eval", "eval", lambda out: out.mkdir()).is_dir()   # its own leftovers: removed, redone
    assert not (tmp_path / "run" / "eval.partial").exists() and not list((tmp_path / "run" / "eval").iterdir())


def test_a_summary_may_go_inside_a_run_folder_but_not_inside_a_model_folder(tmp_path, capsys):
    from agentprm.cli import build_parser
    from agentprm.outputs import prepared

    run = tmp_path / "run"
    with prepared(build_parser().parse_args(["quickstart", "--out", str(run), "--json", str(run / "r.json")])):
        pass
    refused(["train-prm", "--targets", "t", "--init", "tiny", "--out", str(tmp_path / "prm"),
             "--json", str(tmp_path / "prm" / "m.json")], capsys, "overlaps")
    assert list(tmp_path.iterdir()) == []   # the lock went with it, and so did the folder made to hold it


def test_one_kind_of_output_never_replaces_another(tmp_path, capsys):
    """A file agentprm wrote is replaced only by the same kind of output (or with --overwrite), and a file inside
    another output's folder never: a page over a run's results.json or its eval episodes, demos or targets over a
    rollout folder's shard, --json over a run's config or ownership marker, eval episodes over a targets file, a
    layout prior over a summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentprm.data.tables import write_with_info
    from agentprm.data.trajectories import EpisodeRecord, StepRecord, write_episodes_file
    from agentprm.outputs import file_kind, mark_owned

    run, shards = tmp_path / "R", tmp_path / "rollouts"
    for folder, kind in ((run, "run"), (shards, "shards")):
        folder.mkdir()
        mark_owned(folder, kind)
    provenance = {"provenance": {"versions": {"agentprm": "0"}}}
    (run / "results.json").write_text(json.dumps({"rows": [], "comparisons": [], "config": {}, **provenance}))
    (run / "config.yaml").write_text("algo: agentprm\n")
    episode = EpisodeRecord("e0", "t0", "pick_and_place_simple", "put x.", "expert", 0,
                            [StepRecord(0, "You are in a room.", ("look",), "look", 1.0, True, True)])
    (run / "evals").mkdir()
    write_episodes_file(run / "evals" / "pi0.parquet", [episode])
    write_episodes_file(shards / "part-00000.parquet", [episode])
    write_with_info(tmp_path / "t.parquet", pa.table({"state_key": ["s"], "q": [1.0]}), {})
    (tmp_path / "s.json").write_text(json.dumps({"success_rate": 0.5, **provenance}))
    kinds = {p.name: file_kind(p) for p in (run / "results.json", run / "evals" / "pi0.parquet", tmp_path / "t.parquet",
                                            tmp_path / "s.json", run / "config.yaml")}
    assert kinds == {"results.json": "results", "pi0.parquet": "trajectories", "t.parquet": "targets",
                     "s.json": "summary", "config.yaml": ""}
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    cases = [["view", str(run), "--out", str(run / "results.json"), "--overwrite"],
             ["view", str(run), "--out", str(run / "evals" / "pi0.parquet")],
             ["view", str(run), "--out", str(tmp_path / "s.json")],
             ["demos", "--tasks", "t", "--out", str(shards / "part-00000.parquet")],
             ["targets", "mc", "--rollouts", str(run / "evals"), "--out", str(shards / "part-00000.parquet")],
             ["tasks", "layout", "--tasks", "t", "--out", str(tmp_path / "s.json")],
             ["eval", "--policy", "random", "--tasks", "t", "--episodes", str(tmp_path / "t.parquet")],
             ["eval", "--policy", "random", "--tasks", "t", "--json", str(run / "config.yaml"), "--overwrite"],
             ["eval", "--policy", "random", "--tasks", "t", "--json", str(run / ".agentprm-owned.json")]]
    for argv in cases:
        err = refused(argv, capsys, "")
        assert any(why in err for why in ("a file of the agentprm output", "not a ")), err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
