"""The default π0 ships inside the package: it loads like any policy folder and carries its own held-out eval."""
import json
import os
import stat

import pytest

from agentprm.data.summary import wilson_ci
from agentprm.io import write_json
from agentprm.outputs import atomic_dir
from agentprm.loop.run import DEFAULT_POLICY


def test_bundled_policy_loads_and_records_its_eval():
    from agentprm.agent.lm import LMAgent

    agent = LMAgent.load(DEFAULT_POLICY)
    assert agent.mode == "choose" and sum(p.numel() for p in agent.backend.model.parameters()) < 2_000_000
    meta = json.loads((DEFAULT_POLICY / "agentprm.json").read_text())
    assert meta["sft"]["config"]["seed"] == 0                        # built by scripts/build_default_policy.py
    ev = json.loads((DEFAULT_POLICY / "eval.json").read_text())
    assert ev["episodes"] >= 36 and ev["success_rate"] == ev["successes"] / ev["episodes"]
    assert ev["ci95"] == pytest.approx(wilson_ci(ev["successes"], ev["episodes"]))


def test_bundled_policy_speaks_the_current_prompt_format():
    """Its vocabulary is the one the current format and env text build: a prompt-format change that adds a word
    must rebuild the bundled π0 (scripts/build_default_policy.py), or its prompts would carry <unk>."""
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import load_tokenizer

    assert load_tokenizer(DEFAULT_POLICY).get_vocab() == build_tokenizer().get_vocab()


def test_atomic_writes_are_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        write_json(tmp_path / "r.json", {"a": 1})
        with atomic_dir(tmp_path / "d") as d:
            (d / "x").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
