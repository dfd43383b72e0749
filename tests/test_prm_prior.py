"""A PRM with a prior: Q = σ(f_φ(s, a) + w · log π_ref(a | s)), π_ref frozen and saved with the PRM (prm/model.py)."""
from __future__ import annotations

import json
import math

import pytest
import torch

from agentprm.agent.encoding import PromptConfig, prompt_ids
from agentprm.agent.format import format_reply
from agentprm.agent.lm import LMAgent
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.cli import main
from agentprm.errors import UserError
from agentprm.models import build_model
from agentprm.prm import ProcessRewardModel, train_prm
from agentprm.prm.config import PrmDataConfig
from agentprm.prm.losses import get_prm_loss
from agentprm.prm.train import make_loss_fn
from agentprm.train.config import TrainConfig

from test_prm import states_and_replies, targets_file  # noqa: F401  (fixtures)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("policy")
    tok = build_tokenizer()
    build_model("tiny", tok, seed=5).save_pretrained(folder)
    tok.save_pretrained(folder)
    PromptConfig().save(folder)
    return folder


def policy_logp(policy_dir, states, replies) -> torch.Tensor:
    """log π(a | s) by the agent's choose-mode scoring: another code path than the PRM's (packed candidates)."""
    agent = LMAgent.load(policy_dir)
    prompts = [prompt_ids(agent.tokenizer, s, agent.prompt_cfg) for s in states]
    return torch.stack([agent.backend.score([p], [[agent._ids(format_reply(r))]])[0][0]
                        for p, r in zip(prompts, replies)])


def head_logits(prm: ProcessRewardModel, states, replies) -> torch.Tensor:
    prior, prm.prior = prm.prior, None
    try:
        q = prm.score(states, replies).double()
    finally:
        prm.prior = prior
    return torch.log(q) - torch.log1p(-q)


def test_prior_adds_w_log_pi_to_the_logit_and_orders_like_the_policy(policy_dir, states_and_replies):  # noqa: F811
    state = states_and_replies[0][1]   # at the drawer
    replies = ["take apple 1", "look", "go to cabinet 1", "inventory"]
    prm = ProcessRewardModel.init(policy_dir, seed=0)
    torch.nn.init.zeros_(prm.lm.score.weight)          # f = 0: the score is the prior alone
    prm.attach_prior(policy_dir, 2.0)
    q = prm.score([state] * 4, replies).double()
    logp = policy_logp(policy_dir, [state] * 4, replies).double()
    assert torch.allclose(q, torch.sigmoid(2.0 * logp), rtol=1e-4, atol=1e-7)
    assert torch.argsort(q).tolist() == torch.argsort(logp).tolist()


def test_prior_is_frozen_outside_the_state_dict_and_round_trips(policy_dir, states_and_replies, tmp_path):  # noqa: F811
    states, replies = states_and_replies
    prm = ProcessRewardModel.init(policy_dir, seed=1)
    prm.attach_prior(policy_dir, 0.5)
    trained = {id(p) for p in prm.parameters()}
    assert not any(id(p) in trained for p in prm.prior.policy.parameters())
    assert not any(p.requires_grad for p in prm.prior.policy.parameters())
    assert set(prm.state_dict()) == set(ProcessRewardModel.init(policy_dir, seed=1).state_dict())
    before = prm.score(states, replies)
    prm.save(tmp_path / "prm")
    assert json.loads((tmp_path / "prm" / "agentprm.json").read_text())["prior_weight"] == 0.5
    assert (tmp_path / "prm" / "prior" / "config.json").is_file()
    loaded = ProcessRewardModel.load(tmp_path / "prm")
    assert loaded.prior.weight == 0.5 and torch.equal(loaded.score(states, replies), before)
    meta = tmp_path / "prm" / "agentprm.json"
    for bad in ("0.5", -1.0, True):   # a hand-edited agentprm.json: one line naming the file and field
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "prior_weight": bad}))
        with pytest.raises(UserError, match=r"agentprm.json: field 'prior_weight' must be a number >= 0"):
            ProcessRewardModel.load(tmp_path / "prm")
    plain = ProcessRewardModel.init(policy_dir, seed=1)
    plain.save(tmp_path / "plain")
    assert ProcessRewardModel.load(tmp_path / "plain").prior is None
    assert "prior_weight" not in json.loads((tmp_path / "plain" / "agentprm.json").read_text())


def test_offsets_enter_both_loss_kinds_by_hand():
    class Fixed:   # a sequence's (a reply's) logit is its first token
        def logits_of(self, seqs):
            return torch.tensor([float(s[0]) for s in seqs], requires_grad=True)

        def logits_packed(self, prompts, replies):
            return [self.logits_of(rs) for rs in replies]

    loss, stats = make_loss_fn(get_prm_loss("bradley-terry"))(Fixed(), [([9], [1], [3], 0.5, -4.0),
                                                                         ([9], [2], [2], 0.0, 1.0)])
    want = (math.log1p(math.exp(-(1 + 0.5 - 3 + 4.0))) + math.log1p(math.exp(-(2 - 2 - 1.0)))) / 2
    assert loss.item() == pytest.approx(want) and stats["pair_acc"] == 0.5
    loss, _ = make_loss_fn(get_prm_loss("soft-bce"))(Fixed(), [([0], 1.0, 2.0), ([1], 0.0, -3.0)])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert loss.item() == pytest.approx(-(math.log(sig(2.0)) + math.log(1 - sig(-2.0))) / 2)
    # listwise: logits 1 + 0.5, 3 − 4.0, 2 + 1.0 with Q̂ 0.9, 0.1, 0.5 — reply 0 beats 1 and 2, reply 2 beats 1
    loss, stats = make_loss_fn(get_prm_loss("plackett-luce"))(Fixed(), [([9], ([1], [3], [2]), (0.9, 0.1, 0.5),
                                                                          (0.5, -4.0, 1.0))])
    lse = lambda *xs: math.log(sum(math.exp(x) for x in xs))  # noqa: E731
    assert loss.item() == pytest.approx((lse(1.5, -1.0, 3.0) - 1.5 + lse(3.0, -1.0) - 3.0) / 2)
    assert stats["pair_acc"] == pytest.approx(2 / 3)    # 1.5 > −1, 3 > −1 right; 1.5 > 3 wrong


def test_train_prm_with_a_prior_keeps_it_frozen_and_scores_head_plus_prior(policy_dir, targets_file, tmp_path):  # noqa: F811
    before = {k: v.clone() for k, v in LMAgent.load(policy_dir).backend.model.state_dict().items()}
    # the untrained policy prefers "look" (−12.3) to the winning "take apple 1" (−23.8): at w 0.1 the prior alone
    # orders every pair wrong, and the head learns the residual that turns it round
    metrics = train_prm(targets_file, policy_dir, "bradley-terry", tmp_path / "prm",
                        TrainConfig(lr=3e-3, epochs=12, batch_size=3, seed=0, log_every=1000), prior_weight=0.1)
    assert metrics["prior_weight"] == 0.1 and metrics["initial"]["train"]["pairwise_accuracy"] == 0.0
    assert metrics["final"]["train"]["pairwise_accuracy"] == 1.0
    prm = ProcessRewardModel.load(tmp_path / "prm")
    saved = prm.prior.policy.state_dict()
    assert all(torch.equal(saved[k], v) for k, v in before.items())
    from test_prm import episodes_for
    from agentprm.agent.replay import episode_states
    pairs = [sp for e in episodes_for("t0", n=1) for sp in episode_states(e)]
    states, replies = [s for s, _ in pairs], [r for _, r in pairs]
    want = torch.sigmoid(head_logits(prm, states, replies) + 0.1 * policy_logp(policy_dir, states, replies).double())
    assert torch.allclose(prm.score(states, replies).double(), want, rtol=1e-4, atol=1e-6)


def test_a_prior_needs_a_policy_init_and_a_per_row_loss(targets_file, policy_dir, tmp_path):  # noqa: F811
    with pytest.raises(UserError, match="not a policy folder"):
        train_prm(targets_file, "tiny", "soft-bce", tmp_path / "a", TrainConfig(epochs=1), prior_weight=1.0)
    with pytest.raises(UserError, match="needs a pointwise, pairwise or listwise loss"):
        train_prm(targets_file, policy_dir, "pqm", tmp_path / "b", TrainConfig(epochs=1), prior_weight=1.0)
    other = tmp_path / "other-tokenizer"
    tok = build_tokenizer()
    tok.add_tokens(["zzzunseen"])
    build_model("tiny", tok, seed=0).save_pretrained(other)
    tok.save_pretrained(other)
    PromptConfig().save(other)
    prm = ProcessRewardModel.init(policy_dir, seed=0)
    with pytest.raises(UserError, match="tokenizer is not the PRM's"):
        prm.attach_prior(other, 1.0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cli_prior_weight_flag(targets_file, policy_dir, tmp_path):  # noqa: F811
    summary = tmp_path / "s.json"
    assert main(["train-prm", "--targets", str(targets_file), "--init", str(policy_dir), "--loss", "bradley-terry",
                 "--prior-weight", "0.5", "--out", str(tmp_path / "prm"), "--epochs", "1", "--json", str(summary)]) == 0
    assert json.loads(summary.read_text())["prior_weight"] == 0.5
    assert ProcessRewardModel.load(tmp_path / "prm").prior.weight == 0.5


def test_a_prm_reading_more_than_its_prior_keeps_the_prior_on_its_policys_prompt(policy_dir, targets_file,  # noqa: F811
                                                                                    states_and_replies, tmp_path):
    """`inputs` changes what the PRM reads (the admissible commands listed, all earlier turns); the prior's log π
    is still π's own, on π's prompt — the same offsets as a PRM on π's prompt, after a save and load."""
    states, replies = states_and_replies
    metrics = train_prm(targets_file, policy_dir, "bradley-terry", tmp_path / "prm", TrainConfig(epochs=1, seed=0),
                        prior_weight=0.5, inputs={"show_admissible": True, "history_turns": 8})
    prm = ProcessRewardModel.load(tmp_path / "prm")
    assert (prm.prompt.show_admissible, prm.prompt.history_turns) == (True, 8)
    assert prm.prior.prompt == PromptConfig()
    assert "Actions:" in prm.tokenizer.decode(prm.encode(states[1], replies[1]))
    want = torch.sigmoid(head_logits(prm, states, replies) + 0.5 * policy_logp(policy_dir, states, replies).double())
    assert torch.allclose(prm.score(states, replies).double(), want, rtol=1e-4, atol=1e-6)
    # the offsets training used are the same π-prompt offsets (its initial eval scored with them)
    assert metrics["initial"]["train"]["n"] > 0
    same = ProcessRewardModel.init(policy_dir, seed=0)
    same.attach_prior(policy_dir, 0.5)
    from agentprm.agent.encoding import reply_ids
    ids = [reply_ids(prm.tokenizer, r) for r in replies]
    assert torch.allclose(prm.prior_offsets(states, [prompt_ids(prm.tokenizer, s, prm.prompt)
                                                     for s in states], ids),
                          same.prior_offsets(states, [prompt_ids(same.tokenizer, s, same.prompt) for s in states], ids))
    # a PRM saved before the prior kept its own prompt file reads states as the PRM does
    (tmp_path / "prm" / "prior" / "agentprm.json").unlink()
    assert ProcessRewardModel.load(tmp_path / "prm").prior.prompt == prm.prompt


def test_cli_and_config_set_the_prms_inputs(targets_file, policy_dir, tmp_path):  # noqa: F811
    from agentprm.loop.config import from_dict
    from agentprm.prm.config import PrmConfig

    assert PrmConfig().inputs() == {} and PrmConfig(show_admissible=False).inputs() == {"show_admissible": False}
    assert from_dict({"prm": {"history_turns": 4, "show_admissible": True}}).prm.inputs() == {
        "history_turns": 4, "show_admissible": True}
    for bad, say in (({"history_turns": "4"}, "must be a number"), ({"show_admissible": 1}, "must be true/false"),
                     ({"history_turns": True}, "must be a number"), ({"history_turns": -1}, "must be >= 0")):
        with pytest.raises(UserError, match=rf"field 'prm\.\w+' {say}"):
            from_dict({"prm": bad})
    assert main(["train-prm", "--targets", str(targets_file), "--init", str(policy_dir), "--out", str(tmp_path / "prm"),
                 "--epochs", "1", "--show-admissible", "--history-turns", "3"]) == 0
    prm = ProcessRewardModel.load(tmp_path / "prm")
    assert (prm.prompt.show_admissible, prm.prompt.history_turns) == (True, 3) and prm.prior is None
    assert main(["train-prm", "--targets", str(targets_file), "--init", str(policy_dir), "--out", str(tmp_path / "p2"),
                 "--epochs", "1"]) == 0
    assert ProcessRewardModel.load(tmp_path / "p2").prompt == PromptConfig()   # no flag: the init's prompt


def test_a_prior_from_another_policy_than_the_init(policy_dir, targets_file, states_and_replies, tmp_path):  # noqa: F811
    """`prior_policy`: the PRM starts from one model (here another tiny one with the same tokenizer), its prior is
    log π of the named policy — not of the init."""
    other = tmp_path / "other"
    tok = build_tokenizer()
    build_model("tiny", tok, seed=9).save_pretrained(other)
    tok.save_pretrained(other)
    PromptConfig().save(other)
    states, replies = states_and_replies
    train_prm(targets_file, other, "bradley-terry", tmp_path / "prm", TrainConfig(epochs=1, seed=0),
              prior_weight=1.0, prior_policy=policy_dir)
    prm = ProcessRewardModel.load(tmp_path / "prm")
    want = torch.sigmoid(head_logits(prm, states, replies) + policy_logp(policy_dir, states, replies).double())
    assert torch.allclose(prm.score(states, replies).double(), want, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(policy_logp(other, states, replies), policy_logp(policy_dir, states, replies))


def test_training_scores_the_prior_only_on_rows_it_trains_on_or_evaluates(policy_dir, targets_file, tmp_path,  # noqa: F811
                                                                          monkeypatch):
    """MC targets hold every visited (s, a); Bradley-Terry trains on the few states with two actions, so log π0 of
    the rest is never read. The fixture: 4 tasks × (start: one action; drawer: two) = 12 rows, 4 pairs on 8 rows;
    the metrics score one task's 3 rows — 9 rows need the prior. A row's log π0 does not depend on the replies
    packed beside it, so scoring fewer rows changes no value."""
    calls = []
    original = ProcessRewardModel.prior_offsets

    def spy(self, states, prompts, replies, batch_size=32):
        out = original(self, states, prompts, replies, batch_size)
        calls.append((self, states, prompts, replies, out))
        return out

    monkeypatch.setattr(ProcessRewardModel, "prior_offsets", spy)
    metrics = train_prm(targets_file, policy_dir, "bradley-terry", tmp_path / "prm", TrainConfig(epochs=1, seed=0),
                        PrmDataConfig(heldout_frac=0.0), prior_weight=1.0, eval_rows=3)
    assert metrics["evaluated_rows"] == {"train": 3, "heldout": 0} and metrics["examples"] == 4
    (prm, states, prompts, replies, out), = calls
    assert len(replies) == 9 and sum(s.key() != states[0].key() for s in states) >= 1
    alone = torch.cat([original(prm, [s], [p], [r]) for s, p, r in zip(states, prompts, replies)])
    assert torch.allclose(out, alone, rtol=1e-5, atol=1e-5) and bool((out < 0).all())
