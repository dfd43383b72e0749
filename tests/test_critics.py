"""Critics by name (agentprm/search/critics.py): the built-ins, refusals, and a critic of one's own — one file outside
the package, registered by decorator or by an entry point — chosen by name in `agentprm eval` and the loop config."""
from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import pytest

from agentprm.errors import UserError
from agentprm.search.critics import CRITICS, CriticContext, make_critic, register_critic

TOY = '''
"""A critic of one's own: longer replies score higher (a deterministic, model-free ranking)."""
import torch

from agentprm.search.critics import register_critic


class LongestReply:
    name = "longest"
    calls = 0

    def score(self, states, replies):
        LongestReply.calls += 1
        return torch.tensor([len(r) / 100 for r in replies], dtype=torch.float32)


@register_critic("{name}")
def make(ctx):
    return LongestReply()
'''


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy_critic.py"
    path.write_text(TOY.format(name="test-longest"))
    module = load_file(path, "toy_critic")
    yield module
    CRITICS.pop("test-longest", None)


def test_builtins_by_name_and_one_line_refusals():
    from agentprm.search.uniform import UniformCritic

    assert {"prm", "uniform", "logpi", "oracle", "layout"} <= set(CRITICS)
    critic = make_critic("uniform", CriticContext(seed=7))
    assert isinstance(critic, UniformCritic) and critic.seed == 7
    with pytest.raises(UserError, match="unknown critic 'nope'; known: prm, uniform"):
        make_critic("nope", CriticContext())
    with pytest.raises(UserError, match="critic 'prm' needs prm"):
        make_critic("prm", CriticContext())
    with pytest.raises(UserError, match="critic 'oracle' needs policy and tasks"):
        make_critic("oracle", CriticContext())
    with pytest.raises(UserError, match="critic 'layout' needs options prior"):
        make_critic("layout", CriticContext())
    with pytest.raises(ValueError, match="registered already"):
        register_critic("uniform")(lambda ctx: None)


def test_a_critic_from_one_outside_file_is_chosen_by_name_in_eval(toy, tiny_policy, generated_tasks, tmp_path):
    """`agentprm eval --prm test-longest --best-of 3` ranks with the toy critic: it is called, and the run plays what
    Best-of-3 with that critic object plays directly."""
    from agentprm.agent.lm import LMAgent
    from agentprm.cli import main
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.eval.play import EvalPlay, play_eval

    assert isinstance(make_critic("test-longest", CriticContext()), toy.LongestReply)
    out = tmp_path / "s.json"
    assert main(["eval", "--policy", str(tiny_policy), "--tasks", str(generated_tasks.eval), "--max-steps", "3",
                 "--prm", "test-longest", "--best-of", "3", "--temperature", "1", "--seed", "2", "--workers", "1",
                 "--json", str(out)]) == 0
    assert toy.LongestReply.calls > 0
    got = json.loads(out.read_text())
    _, direct = play_eval(LMAgent.load(tiny_policy, temperature=1.0, seed=2), load_tasks(generated_tasks.eval),
                          EvalPlay(1, 3, 2, workers=1), critic=toy.LongestReply(), best_of=3)
    assert got["per_task"] == direct["per_task"] and got["episodes"] == direct["episodes"] == 6


def test_an_entry_point_registers_a_critic_on_first_use(tmp_path, monkeypatch):
    """A package's `agentprm.critics` entry point: the name is unknown until asked for, then its module registers it."""
    (tmp_path / "ep_critic.py").write_text(TOY.format(name="test-ep-longest"))
    info = tmp_path / "ep_critic-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-critic\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agentprm.critics]\ntest-ep-longest = ep_critic\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "test-ep-longest" not in CRITICS
        critic = make_critic("test-ep-longest", CriticContext())
        assert critic.name == "longest" and "test-ep-longest" in CRITICS
        assert critic.score([None, None], ["go to a", "go to cabinet 10"]).tolist() == pytest.approx([0.07, 0.16])
    finally:
        CRITICS.pop("test-ep-longest", None)
        sys.modules.pop("ep_critic", None)


def test_the_loop_config_takes_a_registered_critic_and_names_the_field_otherwise(toy, tmp_path):
    from agentprm.loop.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent("""\
        policy: {critic: test-longest}
    """))
    assert load_config(path).policy.critic == "test-longest"
    assert CRITICS.knows("logpi")
    for bad in ("nope", "layout"):
        path.write_text(f"policy: {{critic: {bad}}}\n")
        with pytest.raises(UserError, match=r"c.yaml: field 'policy.critic' must be a registered critic \(prm, "):
            load_config(path)
