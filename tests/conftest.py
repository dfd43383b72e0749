"""Shared fixtures.

`generated_tasks` (session scope): a small set of verified ALFWorld games, generated once per test session
(~20 s on 2 cores) and shared by every test that asks for it. It returns a `GeneratedTasks` with

    .train  folder with tasks.jsonl + 6 games, one per task type (TASK_TYPES order), floor plans of the train split
    .eval   the same for the eval split (floor plans disjoint from train)
    .seed / .num  the arguments they were generated with (seed 0, 6 games each)

Load them with `agentprm.envs.alfworld.tasks.load_tasks(generated_tasks.train)` and play one with
`AlfWorldEnv(task.game)`. Treat the folders as read-only (copy them first if a test must modify games).

`first_turns` (session): (task, the first Turn of its game, the Turn after "look") for the first train game.
`tiny_policy` (session): folder of an untrained `tiny` policy (seed 0), as `agentprm sft` would save it.
`tree(root)`: every path under root with its type and content digest — "the user's files are unchanged" is
`tree(root) == before` (tests/test_outputs.py, tests/test_battery.py).
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


def tree(root: Path) -> dict[str, str]:
    """Every path under `root` (hidden ones too) -> its type and content digest: what 'unchanged' means here."""
    found = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            found[str(path)] = "file " + hashlib.sha256(path.read_bytes()).hexdigest() + f" {st.st_mtime_ns}"
        elif stat.S_ISLNK(st.st_mode):
            found[str(path)] = "link " + os.readlink(path)
        else:
            found[str(path)] = stat.filemode(st.st_mode)[0]
    return found


@dataclass(frozen=True)
class GeneratedTasks:
    train: Path
    eval: Path
    seed: int
    num: int


@pytest.fixture(scope="session", autouse=True)
def _private_game_cache(tmp_path_factory) -> None:
    """Generated games are cached per user (generate.game_cache_dir); tests use a cache of their own, so they neither
    read games an older run left nor fill the user's."""
    import os

    os.environ["AGENTPRM_GAME_CACHE"] = str(tmp_path_factory.mktemp("game_cache"))


@pytest.fixture(scope="session")
def generated_tasks(tmp_path_factory: pytest.TempPathFactory) -> GeneratedTasks:
    from agentprm.envs.alfworld.generate import generate_tasks

    root = tmp_path_factory.mktemp("generated_tasks")
    seed, num = 0, 6
    for split in ("train", "eval"):
        generate_tasks(root / split, split, num, seed, progress=False)
    return GeneratedTasks(train=root / "train", eval=root / "eval", seed=seed, num=num)


@pytest.fixture(scope="session")
def first_turns(generated_tasks):
    from agentprm.envs.alfworld.engine import AlfWorldEnv
    from agentprm.envs.alfworld.tasks import load_tasks

    task = load_tasks(generated_tasks.train)[0]
    env = AlfWorldEnv(task.game)
    first = env.reset()
    second = env.step("look")
    env.close()
    return task, first, second


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> Path:
    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model

    tok = build_tokenizer()
    return save_policy(build_model("tiny", tok, seed=0), tok, tmp_path_factory.mktemp("pi") / "pi0", PromptConfig())


@pytest.fixture(autouse=True)
def _default_placement():
    """A test that places models (`--dtype bfloat16`, a loop's `device:` section, `--threads`) does not leak it into
    the next."""
    torch = sys.modules.get("torch")   # not imported here: some tests check a command never imports it
    threads = torch.get_num_threads() if torch else None
    yield
    from agentprm.models import device

    device._placement, device._training, device._threads_chosen = None, ("no", False), False
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


MINI_LOOP_ROWS = [("pi0", 1, None), ("pi1", 1, None), ("pi1", 2, None), ("pi1", 2, "beam2x1"),
                  ("pi1", 2, "bon2-uniform"), ("pi1", 2, "beam2x1-uniform")]


def run_mini_loop(tmp_path: Path, cfg: dict) -> tuple[Path, list[dict]]:
    """Run `cfg` (a one-iteration loop config with `eval: {best_of_n: [2], beam_expand: 1}`) into tmp_path/run and
    return the run folder and its results rows, checked to be greedy π0 and π1, Best-of-2 and beam 2x1 with Q1 and
    the same two searches with a uniform critic."""
    import json

    import yaml

    from agentprm.cli import main

    (tmp_path / "loop.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(tmp_path / "loop.yaml"), "--run-dir", str(run)]) == 0
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert [(r["policy"], r["best_of_n"], r.get("search")) for r in rows] == MINI_LOOP_ROWS
    return run, rows
