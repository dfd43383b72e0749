"""PQM's comparative loss (hand-computed) and labels; PRIME's implicit PRM: loss, training, Best-of-N use, save/load."""
from __future__ import annotations

import math

import pytest
import torch

from agentprm.agent.encoding import PromptConfig
from agentprm.agent.state import AgentState
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.data.trajectories import EpisodeRecord, StepRecord
from agentprm.models import build_model
from agentprm.prm.pqm import PQMLoss, first_error_index, pqm_loss, pqm_trajectories
from agentprm.prm.prime import ImplicitPRM, prime_loss, train_prime
from agentprm.train.config import TrainConfig


def nll(x: float, *others: float) -> float:
    return -math.log(math.exp(x) / (math.exp(x) + sum(math.exp(o) for o in others)))


def test_pqm_loss_hand_computed():
    q = torch.tensor([1.0, 2.0, 0.5])
    # C = steps 0, 1; W = step 2 with margin ζ = 1
    expected = (nll(1.0, 0.5 + 1) + nll(2.0, 1.0, 0.5 + 1)) / 2
    assert pqm_loss(q, first_error=2, zeta=1.0).item() == pytest.approx(expected, rel=1e-6)
    # all correct: only the order among correct steps counts
    assert pqm_loss(q[:2], first_error=2, zeta=1.0).item() == pytest.approx(nll(2.0, 1.0) / 2, rel=1e-6)
    # the first step is wrong: no correct step, no loss (but still differentiable)
    zero = pqm_loss(q.requires_grad_(), first_error=0)
    assert zero.item() == 0.0 and zero.requires_grad


def test_pqm_loss_prefers_correct_steps_above_wrong_by_the_margin():
    good, bad = torch.tensor([1.0, 2.0, -3.0]), torch.tensor([-3.0, 2.0, 1.0])
    assert pqm_loss(good, 2, 1.0) < pqm_loss(bad, 2, 1.0)
    assert pqm_loss(good, 2, 4.0) > pqm_loss(good, 2, 0.0)    # a larger margin asks for more


def test_first_error_index():
    assert first_error_index([0.5, 0.0, 0.0], won=True) == 3
    assert first_error_index([0.5, 0.25, 0.0, 0.0], won=False) == 2
    assert first_error_index([0.5, 0.25], won=False) == 1          # no Q̂ = 0: the last step
    assert first_error_index([0.5, 0.2, 0.1], won=False, error_q=0.2) == 1


@pytest.fixture(scope="module")
def start(first_turns):
    torch.set_num_threads(1)
    return first_turns


def episode(task, turns, actions, won: bool, k: int) -> EpisodeRecord:
    steps = [StepRecord(t, turn.observation, tuple(turn.admissible), a, float(won and t == len(actions) - 1),
                        t == len(actions) - 1, won and t == len(actions) - 1, True)
             for t, (turn, a) in enumerate(zip(turns, actions))]
    return EpisodeRecord(f"e{k}", task.task_id, task.task_type, turns[0].task, "test", 0, steps)


def test_pqm_trajectories_and_training_rank_correct_steps_first(start):
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.train.core import train

    task, first, second = start
    ep = episode(task, [first, second], ["look", "inventory"], won=False, k=0)
    s0 = AgentState.start(first, task.task_id)
    s1 = s0.advance("look", second)
    q_of = {(s0.key(), "look"): 0.5, (s1.key(), "inventory"): 0.0}
    prm = ProcessRewardModel.init("tiny", seed=0)
    trajs = pqm_trajectories([ep], q_of, prm.tokenizer, prm.prompt)
    assert len(trajs) == 1 and trajs[0].first_error == 1 and len(trajs[0].seqs) == 2
    history = train(prm, trajs, PQMLoss(zeta=1.0), TrainConfig(lr=3e-3, epochs=15, batch_size=1, log_every=1),
                    progress=False)
    q = prm.score([s0, s1], ["look", "inventory"])
    assert q[0] > q[1] and history[-1]["ranked_frac"] == 1.0


def test_prime_loss_hand_computed():
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    loss = prime_loss([torch.tensor([0.2, 0.3]), torch.tensor([-0.1])], torch.tensor([1.0, 0.0]))
    expected = (-math.log(sig(0.5)) - math.log(1 - sig(-0.1))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.fixture
def prime(tmp_path):
    from agentprm.agent.checkpoint import save_policy

    tok = build_tokenizer()
    pi = save_policy(build_model("tiny", tok, seed=0), tok, tmp_path / "pi", PromptConfig())
    return ImplicitPRM.from_policy(pi, beta=0.5)


def test_prime_learns_turn_rewards_from_outcomes_and_serves_best_of_n(start, prime, tmp_path):
    from agentprm.agent.lm import LMAgent
    from agentprm.search.best_of_n import BestOfNAgent

    task, first, _ = start
    s0 = AgentState.start(first, task.task_id)
    assert prime.score([s0, s0], ["inventory", "look"]).tolist() == [0.5, 0.5]   # φ = ref: every r is 0
    episodes = [episode(task, [first], ["inventory"], True, 0), episode(task, [first], ["look"], False, 1)]
    history = train_prime(prime, episodes, TrainConfig(lr=3e-3, epochs=10, batch_size=2, log_every=1))
    good, bad = prime.score([s0, s0], ["inventory", "look"]).tolist()
    assert good > 0.5 > bad and history[-1]["outcome_acc"] == 1.0

    gen = LMAgent(build_model("tiny", prime.tokenizer, seed=1), prime.tokenizer, temperature=1.0, seed=0)
    [reply] = BestOfNAgent(gen, prime, n=4).act([s0], [first])
    assert reply in first.admissible

    loaded = ImplicitPRM.load(prime.save(tmp_path / "prime"))
    assert loaded.beta == 0.5
    assert torch.allclose(loaded.score([s0, s0], ["inventory", "look"]), torch.tensor([good, bad]), atol=1e-5)


def test_prime_mini_loop_uses_the_implicit_prm(tmp_path, generated_tasks):
    """`algo: prime`: implicit PRM from outcomes → online DPO against it → eval and Best-of-N with it."""
    import json

    import yaml

    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.cli import main
    from agentprm.models import build_model
    from agentprm.prm.loading import load_prm
    from agentprm.prm.prime import ImplicitPRM

    tok = build_tokenizer()
    pi0 = save_policy(build_model("tiny", tok, seed=0), tok, tmp_path / "pi0", PromptConfig())
    cfg = {"algo": "prime", "seed": 0, "iterations": 1,
           "tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval),
                     "types": ["pick_and_place_simple", "look_at_obj_in_light"]},
           "policy0": {"path": str(pi0)},
           "rollout": {"per_task": 2, "max_steps": 3, "num_envs": 4, "workers": 2},
           "prime": {"epochs": 1, "batch_size": 2},
           "policy": {"steps": 2, "batch_size": 2},
           "eval": {"max_steps": 3, "best_of_n": [2], "critic_control": False}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(run)]) == 0
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert [(r["policy"], r["best_of_n"], r.get("search")) for r in rows] == [
        ("pi0", 1, None), ("pi1", 1, None), ("pi1", 2, None), ("pi1", 4, "beam2x2")]   # beam with the implicit PRM
    assert isinstance(load_prm(run / "iter_1" / "prm"), ImplicitPRM)
