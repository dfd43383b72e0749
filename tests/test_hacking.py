"""Reward-hacking detector (agentprm/policy/hacking.py) with stand-in PRMs whose answer is known, and the training
core's stop signal it relies on."""
from __future__ import annotations

import warnings

import pytest
import torch

from agentprm.agent.lm import LMAgent
from agentprm.agent.state import AgentState
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.envs.base import Turn
from agentprm.models import build_model
from agentprm.policy.hacking import HackingConfig, HackingDetector, HackingWarning, ProbeResult, hold_out
from agentprm.targets.mc import returns_to_go
from agentprm.policy.online_dpo import train_online_dpo
from agentprm.policy.config import PolicyUpdateConfig
from agentprm.train.config import TrainConfig
from agentprm.train.core import train

COMMANDS = ("look", "inventory", "help", "go to desk 1")
HACK = "inventory"   # in the probe test: a reply Q_i ranks low
SAFE = "look"        # in the probe test: a reply Q_i ranks high


class TablePRM:
    """A stand-in PRM: Q looked up by reply, `default` elsewhere."""

    def __init__(self, table: dict[str, float], default: float = 0.2):
        self.table, self.default = table, default

    def score(self, states, replies) -> torch.Tensor:
        return torch.tensor([self.table.get(r, self.default) for r in replies])


@pytest.fixture(scope="module")
def states() -> list[AgentState]:
    torch.set_num_threads(1)
    return [AgentState.start(Turn(task=f"Your task is to: put a mug {k} on the desk.",
                                  observation=f"You are in the middle of a room. Step {k}.", admissible=COMMANDS),
                             task_id=f"t{k}") for k in range(8)]


def tiny_policy(seed: int = 0) -> LMAgent:
    tok = build_tokenizer()
    return LMAgent(build_model("tiny", tok, seed=seed), tok, seed=0)


@pytest.fixture(scope="module")
def roles(states) -> tuple[str, str]:
    """(hack, safe): two commands the untrained policy does not already choose greedily on the monitored states,
    so that moving to either is a rise of Q_i the detector can see (which ones depends on the random init).
    Q_i loves `hack` but the rest of the ensemble does not (Q there is unsupported); every PRM agrees on `safe`."""
    chosen = set(tiny_policy().act(states[:4], [None] * 4))
    hack, safe = [c for c in COMMANDS if c not in chosen][:2]
    return hack, safe


def run(preferred: str, states, cfg: HackingConfig, roles: tuple[str, str],
        steps: int = 12) -> tuple[HackingDetector, list[dict]]:
    """Online DPO toward `preferred` under Q_i, watched on `states[:4]`, trained on `states[4:]`. The ensemble
    agrees with Q_i everywhere except on the hack reply (0.0 and 0.4 there instead of Q_i's value)."""
    hack, safe = roles
    prm = TablePRM({preferred: 1.0, safe: 1.0 if preferred == safe else 0.2})
    others = [TablePRM({**prm.table, hack: 0.0}), TablePRM({**prm.table, hack: 0.4})]
    policy = tiny_policy()
    detector = HackingDetector(policy, prm, others, states[:4], cfg, seed=0)
    dpo = PolicyUpdateConfig(beta=0.1, samples_per_state=4, temperature=1.0, steps=steps, batch_size=4, lr=1e-2)
    history, _ = train_online_dpo(policy, prm, states[4:], dpo, progress=False, on_log=detector)
    return detector, history


def test_core_stops_when_on_log_returns_true():
    model = torch.nn.Linear(1, 1)
    calls = []

    def on_log(step: int, row: dict) -> bool:
        calls.append(step)
        return step == 4

    history = train(model, list(range(40)), lambda m, b: (m.weight.sum() ** 2, {}),
                    TrainConfig(epochs=1, batch_size=2, log_every=2), progress=False, on_log=on_log)
    assert calls == [2, 4] and [h["step"] for h in history] == [2, 4]


def test_policy_moving_to_unsupported_replies_raises_the_alarm(states, roles):
    cfg = HackingConfig(check_every=4, samples_per_state=4, prm_rise=0.2, std_rise=0.05)
    with pytest.warns(HackingWarning, match="PRM score"):
        detector, history = run(roles[0], states, cfg, roles)
    base, last = detector.checks[0], detector.checks[-1]
    assert base["step"] == 0 and not base["alarm"]
    assert last["prm"] > base["prm"] + 0.2 and last["ens_std"] > base["ens_std"] + 0.05
    alarms = [c["step"] for c in detector.checks if c["alarm"]]
    assert alarms and detector.alarm_step == alarms[0]
    flagged = [h for h in history if h.get("hack_alarm")]   # the alarm is a flag on the core's logged rows too
    assert flagged and flagged[0]["step"] == detector.alarm_step
    assert history[-1]["step"] == 12   # no stop_on_alarm: the update runs to the end
    assert last["kl"] > 0.1   # π_θ moved away from π_{i-1}


def test_policy_moving_to_agreed_replies_does_not(states, roles):
    cfg = HackingConfig(check_every=4, samples_per_state=4, prm_rise=0.2, std_rise=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HackingWarning)
        detector, _ = run(roles[1], states, cfg, roles)
    assert detector.checks[-1]["prm"] > detector.checks[0]["prm"] + 0.2   # Q_i rose just as much …
    assert detector.checks[-1]["ens_std"] <= detector.checks[0]["ens_std"] + 0.05   # … where the ensemble agrees
    assert detector.alarm_step is None and not any(c["alarm"] for c in detector.checks)


def test_stop_on_alarm_ends_training_at_the_alarming_check(states, roles):
    cfg = HackingConfig(check_every=4, samples_per_state=4, prm_rise=0.2, std_rise=0.05, stop_on_alarm=True)
    with pytest.warns(HackingWarning):
        detector, history = run(roles[0], states, cfg, roles)
    assert detector.alarm_step is not None and detector.alarm_step < 12
    assert history[-1]["step"] == detector.alarm_step and detector.checks[-1]["step"] == detector.alarm_step


def test_probe_spearman_below_threshold_alarms(states):
    """A probe whose returns run against Q_i: the PRM ranks the probe's steps backwards."""
    q = {SAFE: 0.9, "go to desk 1": 0.5, HACK: 0.1}
    replies = [SAFE, "go to desk 1", HACK] * 2

    def probe(agent) -> ProbeResult:
        return ProbeResult(states[:6], replies, [0.0, 0.5, 1.0] * 2, success=0.5)

    cfg = HackingConfig(check_every=1, min_spearman=0.0)
    detector = HackingDetector(tiny_policy(), TablePRM(q), [], states[:2], cfg, probe=probe)
    assert detector.checks[0]["spearman"] == pytest.approx(-1.0) and detector.checks[0]["ens_std"] is None
    with pytest.warns(HackingWarning, match="Spearman"):
        assert detector(1, {}) is False   # alarm, but stop_on_alarm is off
    assert detector.checks[-1]["probe_success"] == 0.5


def test_helpers(states):
    assert returns_to_go([0.0, 0.0, 1.0], 0.5).tolist() == [0.25, 0.5, 1.0]
    monitor, rest = hold_out(states, 3, seed=0)
    assert len(monitor) == 3 and len(rest) == 5 and {s.key() for s in monitor + rest} == {s.key() for s in states}
    assert hold_out(states, 3, seed=0)[0] == monitor


def test_report_plots_the_monitored_updates_only(tmp_path):
    from agentprm.loop.report import plot_hacking

    monitored = {1: [{"step": 2, "prm_mean": 0.3}, {"step": 4, "prm_mean": 0.5, "hack_prm": 0.6, "hack_ens_std": 0.1,
                                                    "hack_kl": 0.2, "hack_spearman": None, "hack_alarm": True}]}
    assert plot_hacking(monitored, tmp_path / "hacking.png") and (tmp_path / "hacking.png").stat().st_size > 0
    assert not plot_hacking({1: [{"step": 2, "prm_mean": 0.3}]}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


@pytest.mark.slow
def test_loop_runs_the_detector_when_enabled(tmp_path, generated_tasks):
    """Wiring: config section → ensemble stages → detector in stage 3 → agentprm.json and the report's plot."""
    import json

    import yaml

    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.cli import main

    tok = build_tokenizer()
    pi0 = save_policy(build_model("tiny", tok, seed=0), tok, tmp_path / "pi0", PromptConfig())
    cfg = {"tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval)},
           "policy0": {"path": str(pi0)}, "rollout": {"per_task": 2, "max_steps": 4, "num_envs": 4, "workers": 2},
           "prm": {"epochs": 1}, "policy": {"steps": 4, "batch_size": 4}, "eval": {"max_steps": 4, "best_of_n": []},
           "hacking": {"enabled": True, "ensemble_size": 2, "monitor_states": 4, "probe_episodes": 2,
                       "check_every": 2}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(run)]) == 0
    update = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())["online_dpo"]
    hacking = update["hacking"]
    assert hacking["ensemble_size"] == 2 and hacking["monitor_states"] == 4
    assert [c["step"] for c in hacking["checks"]] == [0, 2, 4]
    assert all(c["ens_std"] is not None and "spearman" in c and 0 <= c["probe_success"] <= 1 for c in hacking["checks"])
    assert [h["step"] for h in update["history"] if "hack_prm" in h] == [2, 4]
    assert (run / "iter_1" / "prm_ensemble" / "1" / "config.json").exists()
    assert "plots/hacking.png" in (run / "report.md").read_text()
    # the report's history starts at the detector's step-0 baseline (π_{i-1} itself), before the first logged step
    from agentprm.loop.config import load_config
    from agentprm.loop.run import Loop

    loop = Loop(load_config(tmp_path / "c.yaml"), run, resume=True, progress=False)
    loop.run()
    assert [h["step"] for h in loop.update_history[1] if "hack_prm" in h] == [0, 2, 4]
