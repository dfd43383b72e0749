"""GRPO, RLOO, SPRO and GiGPO advantages against hand-computed values; β = 0 is exactly GRPO, and so is GiGPO where
no two steps share a state; SPRO against its frozen π0 is not GRPO; an estimator registered from outside drives the
update."""
from __future__ import annotations

import math

import pytest
import torch

from agentprm.policy.advantages import (anchor_step_advantages, cumulative_process_rewards, gigpo_advantages,
                                        group_outcome_advantages, masked_step_advantages, pad_steps, rloo_advantages,
                                        spro_advantages)
from agentprm.targets.mc import returns_to_go


def test_group_outcome_advantages_hand_computed():
    # o = [1, 0, 0, 1]: mean 0.5, population std 0.5 → ±1
    adv = group_outcome_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    assert adv.tolist() == [1.0, -1.0, -1.0, 1.0]
    # o = [1, 0, 0]: mean 1/3, std sqrt(2)/3 → (2/3)/(sqrt2/3) = sqrt2, (−1/3)/(sqrt2/3) = −1/sqrt2
    adv = group_outcome_advantages(torch.tensor([1.0, 0.0, 0.0]), eps=0.0)
    assert adv.tolist() == pytest.approx([math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)])


def test_equal_outcomes_and_single_episode_give_zero():
    assert group_outcome_advantages(torch.tensor([1.0, 1.0, 1.0])).tolist() == [0.0, 0.0, 0.0]
    assert group_outcome_advantages(torch.tensor([0.0, 0.0])).tolist() == [0.0, 0.0]
    assert group_outcome_advantages(torch.tensor([1.0])).tolist() == [0.0]


def test_rloo_advantages_hand_computed():
    # o = [1, 0, 0, 1]: each against the mean of the other three: 1 − 1/3, 0 − 2/3, 0 − 2/3, 1 − 1/3
    assert rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0])).tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert rloo_advantages(torch.tensor([1.0])).tolist() == [0.0]


def test_pad_steps_masks_ragged_episodes():
    values, mask = pad_steps([[1.0, 2.0, 3.0], [4.0], [5.0, 6.0]])
    assert values.tolist() == [[1, 2, 3], [4, 0, 0], [5, 6, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_cumulative_process_reward_and_masked_step_advantage_hand_computed():
    lr, mask = pad_steps([[1.0, 2.0, 3.0], [-1.0], [0.0, 4.0]])
    R = cumulative_process_rewards(lr, mask, beta=0.5)
    assert R.tolist() == [[0.5, 1.5, 3.0], [-0.5, 0.0, 0.0], [0.0, 2.0, 0.0]]
    msa = masked_step_advantages(R, mask)
    # t=0: mean(0.5, −0.5, 0) = 0; t=1: mean(1.5, 2.0) = 1.75 (episode 1 has ended); t=2: only episode 0 → 0
    assert torch.allclose(msa, torch.tensor([[0.5, -0.25, 0.0], [-0.5, 0.0, 0.0], [0.0, 0.25, 0.0]]))


def test_spro_advantage_is_outcome_plus_msa():
    lr, mask = pad_steps([[1.0, 2.0], [-1.0, 0.0]])
    adv = spro_advantages(torch.tensor([1.0, 0.0]), lr, mask, beta=1.0, eps=0.0)
    # outcome ±1; R = [[1, 3], [−1, −1]]; step means 0 and 1 → MSA = [[1, 2], [−1, −2]]
    assert adv.tolist() == [[2.0, 3.0], [-2.0, -3.0]]


def test_beta_zero_is_exactly_grpo():
    torch.manual_seed(0)
    lr, mask = pad_steps([torch.randn(5).tolist(), torch.randn(2).tolist(), torch.randn(7).tolist()])
    outcomes = torch.tensor([1.0, 0.0, 0.0])
    adv = spro_advantages(outcomes, lr * 100, mask, beta=0.0)
    expected = group_outcome_advantages(outcomes)[:, None] * mask
    assert torch.equal(adv, expected)
    # and a group with equal outcomes gets no signal at all
    assert torch.equal(spro_advantages(torch.ones(3), lr, mask, beta=0.0), torch.zeros_like(mask))


# A hand-built GiGPO group (γ = 0.5): three episodes of one task; state A is reached by all three at turn 0, state B
# by episodes 0 and 1 at turn 1, C, D, E once each.
GROUP_ANCHORS = [["A", "B", "C"], ["A", "B", "D"], ["A", "E"]]
GROUP_REWARDS = [[0, 0, 1], [0, 0, 0], [0, 1]]      # won, lost, won


def test_step_returns_are_discounted_from_the_step():
    assert returns_to_go([0, 0, 1], 0.5).tolist() == [0.25, 0.5, 1.0] and returns_to_go([0, 1], 0.5).tolist() == [0.5, 1.0]


def test_gigpo_advantages_of_a_hand_built_group():
    returns, mask = pad_steps([returns_to_go(r, 0.5).tolist() for r in GROUP_REWARDS])   # [.25 .5 1] [0 0 0] [.5 1 -]
    outcomes = torch.tensor([1.0, 0.0, 1.0])
    # mean only: A^E = o − 2/3; A: returns (.25, 0, .5) − .25 → (0, −.25, +.25); B: (.5, 0) − .25 → ±.25
    adv = gigpo_advantages(outcomes, returns, mask, GROUP_ANCHORS, omega=1.0, std_norm=False, eps=0.0)
    third = 1 / 3
    expected = [[third, third + 0.25, third], [-2 * third - 0.25, -2 * third - 0.25, -2 * third], [third + 0.25, third, 0]]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-6, rtol=0)
    # std-normalised (population std): A → (0, −√1.5, +√1.5); B → (+1, −1); A^E = (1/√2, −√2, 1/√2)
    adv = gigpo_advantages(outcomes, returns, mask, GROUP_ANCHORS, omega=0.5, std_norm=True, eps=0.0)
    e, s = 1 / math.sqrt(2), math.sqrt(1.5)
    expected = [[e, e + 0.5, e], [-2 * e - 0.5 * s, -2 * e - 0.5, -2 * e], [e + 0.5 * s, e, 0]]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-6, rtol=0)


def test_gigpo_step_advantage_is_zero_for_lone_states_and_padding():
    returns, mask = pad_steps([[1.0, 2.0], [3.0]])
    assert torch.equal(anchor_step_advantages(returns, mask, [["a", "b"], ["c"]]), torch.zeros(2, 2))
    # a state revisited inside one episode is an anchor group of its own steps
    step = anchor_step_advantages(returns, mask, [["a", "a"], ["c"]], std_norm=False)
    assert step.tolist() == [[-0.5, 0.5], [0.0, 0.0]]


def test_gigpo_without_shared_states_is_exactly_grpo():
    returns, mask = pad_steps([returns_to_go(r, 0.95).tolist() for r in GROUP_REWARDS])
    outcomes = torch.tensor([1.0, 0.0, 1.0])
    distinct = [[f"{i}{t}" for t in range(len(r))] for i, r in enumerate(GROUP_REWARDS)]
    assert torch.equal(gigpo_advantages(outcomes, returns, mask, distinct),
                       group_outcome_advantages(outcomes)[:, None] * mask)


def test_process_rewards_are_detached():
    lr = torch.tensor([[1.0, 2.0], [0.5, 0.5]], requires_grad=True)
    adv = spro_advantages(torch.tensor([1.0, 0.0]), lr, torch.ones(2, 2), beta=0.1)
    assert not adv.requires_grad


# ------------------------------------------------------------------ the policy-gradient update and the loop algos

@pytest.fixture(scope="module")
def start(first_turns):
    torch.set_num_threads(1)
    return first_turns[:2]


def one_step_episode(task, turn, action: str, won: bool, k: int):
    from agentprm.data.trajectories import EpisodeRecord, StepRecord

    step = StepRecord(0, turn.observation, tuple(turn.admissible), action, float(won), True, won, True)
    return EpisodeRecord(f"e{k}", task.task_id, task.task_type, turn.task, "test", 0, [step])


def tiny():
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model

    tok = build_tokenizer()
    return build_model("tiny", tok, seed=0), tok


def logp_of(model, tok, state, reply: str) -> float:
    from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
    from agentprm.agent.scoring import reply_logprobs

    with torch.no_grad():
        return float(reply_logprobs(model, [prompt_ids(tok, state, PromptConfig())], [reply_ids(tok, reply)],
                                    tok.pad_token_id)[0])


def test_grpo_update_moves_toward_the_winning_reply(start):
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.state import AgentState
    from agentprm.policy.policy_gradient import PolicyGradientConfig, train_policy_gradient

    task, turn = start
    state = AgentState.start(turn, task.task_id)
    episodes = [one_step_episode(task, turn, "inventory", True, 0), one_step_episode(task, turn, "look", False, 1)]
    model, tok = tiny()
    before = logp_of(model, tok, state, "inventory") - logp_of(model, tok, state, "look")
    cfg = PolicyGradientConfig(steps=10, batch_groups=1, lr=3e-3, clip=0.2, entropy_coef=0.0)
    history = train_policy_gradient(model, tok, PromptConfig(), episodes, cfg, progress=False)
    after = logp_of(model, tok, state, "inventory") - logp_of(model, tok, state, "look")
    assert after > before + 0.5, (before, after)
    assert history and all(math.isfinite(h["loss"]) for h in history)


def test_first_step_spro_loss_equals_grpo_loss(start):
    """π_θ = π_ref before any update, so every process reward is 0 and SPRO's loss is GRPO's."""
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.episodes import add_reference_logprobs
    from agentprm.policy.policy_gradient import PolicyGradientConfig, PolicyGradientLoss, encode_groups

    task, turn = start
    episodes = [one_step_episode(task, turn, a, w, k) for k, (a, w) in enumerate([("inventory", True), ("look", False),
                                                                               ("look", True)])]
    model, tok = tiny()
    groups = encode_groups(episodes, tok, PromptConfig())
    add_reference_logprobs([ep for g in groups for ep in g], model, tok.pad_token_id)
    cfg = PolicyGradientConfig(entropy_coef=0.0, spro_beta=0.5)
    grpo, _ = PolicyGradientLoss(cfg, tok.pad_token_id, "grpo")(model, groups)
    spro, _ = PolicyGradientLoss(cfg, tok.pad_token_id, "spro")(model, groups)
    assert torch.equal(grpo.detach(), spro.detach())


def test_spro_against_a_frozen_initial_policy_is_not_grpo(start):
    """π_ref = π0 ≠ π_old (a later iteration): the process reward β log(π_θ/π0) differs between the group's replies
    from the first step, so SPRO's advantages — and loss — differ from GRPO's, while the ratio is still to π_old."""
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.episodes import add_reference_logprobs
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import build_model
    from agentprm.policy.policy_gradient import PolicyGradientConfig, PolicyGradientLoss, encode_groups

    task, turn = start
    episodes = [one_step_episode(task, turn, a, w, k) for k, (a, w) in enumerate([("inventory", True), ("look", False),
                                                                               ("look", True)])]
    model, tok = tiny()
    pi0 = build_model("tiny", build_tokenizer(), seed=1)
    groups = encode_groups(episodes, tok, PromptConfig())
    encoded = [ep for g in groups for ep in g]
    add_reference_logprobs(encoded, model, tok.pad_token_id, "old_logps")
    add_reference_logprobs(encoded, pi0, tok.pad_token_id)
    assert not torch.equal(encoded[0].old_logps, encoded[0].ref_logps)
    cfg = PolicyGradientConfig(entropy_coef=0.0, spro_beta=0.5)
    grads, logs = {}, {}
    for name in ("grpo", "spro"):
        model.zero_grad()
        loss, logs[name] = PolicyGradientLoss(cfg, tok.pad_token_id, name)(model, groups)
        loss.backward()
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert logs["grpo"]["log_ratio"] == logs["spro"]["log_ratio"] == pytest.approx(0.0, abs=1e-6)   # ρ = 1
    assert logs["grpo"]["adv_abs"] != pytest.approx(logs["spro"]["adv_abs"], abs=1e-4)
    assert not torch.allclose(grads["grpo"], grads["spro"], atol=1e-6)


def test_an_estimator_registered_from_outside_drives_the_update(start):
    """One decorated function: the negated GRPO advantage moves π toward the reply that lost."""
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.state import AgentState
    from agentprm.policy.advantages import ADVANTAGES, group_outcome_advantages, register_advantage
    from agentprm.policy.policy_gradient import PolicyGradientConfig, train_policy_gradient

    @register_advantage("test-reverse")
    def reverse(group, cfg):
        return -group_outcome_advantages(group.outcomes)[:, None] * group.mask

    try:
        with pytest.raises(ValueError, match="registered already"):
            register_advantage("test-reverse")(reverse)
        task, turn = start
        state = AgentState.start(turn, task.task_id)
        episodes = [one_step_episode(task, turn, "inventory", True, 0), one_step_episode(task, turn, "look", False, 1)]
        cfg = PolicyGradientConfig(steps=10, batch_groups=1, lr=3e-3, clip=0.2, entropy_coef=0.0)
        model, tok = tiny()
        before = logp_of(model, tok, state, "inventory") - logp_of(model, tok, state, "look")
        train_policy_gradient(model, tok, PromptConfig(), episodes, cfg, "test-reverse", progress=False)
        after = logp_of(model, tok, state, "inventory") - logp_of(model, tok, state, "look")
        assert after < before - 0.5, (before, after)
    finally:
        del ADVANTAGES["test-reverse"]


def test_groups_drop_lone_and_failed_episodes(start):
    from agentprm.agent.encoding import PromptConfig
    from agentprm.policy.policy_gradient import encode_groups

    task, turn = start
    lone = one_step_episode(task, turn, "look", True, 0)
    failed = one_step_episode(task, turn, "look", False, 1)
    failed.error = "worker died"
    _, tok = tiny()
    assert encode_groups([lone, failed], tok, PromptConfig()) == []


def test_anchor_states_are_observation_and_commands():
    """Two steps with one observation ("Nothing happens.") but other commands (holding an apple or not) are two states."""
    from agentprm.data.trajectories import StepRecord
    from agentprm.policy.policy_gradient import anchor_state

    holding = StepRecord(3, "Nothing happens.", ("go to desk 1", "put apple 1 in/on desk 1"), "x")
    empty = StepRecord(5, "Nothing happens.", ("go to desk 1",), "y")
    same = StepRecord(1, "Nothing happens.", ("put apple 1 in/on desk 1", "go to desk 1"), "z", reward=1.0)
    assert anchor_state(holding) != anchor_state(empty) and anchor_state(holding) == anchor_state(same)


def test_gigpo_credits_the_faster_action_where_grpo_sees_nothing(start):
    """Both episodes win, so GRPO's advantages are all 0 and its update leaves π unchanged; they share their first
    state, where "inventory" won one turn sooner than "look": GiGPO's anchor group prefers it."""
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.state import AgentState
    from agentprm.data.trajectories import EpisodeRecord, StepRecord
    from agentprm.policy.policy_gradient import PolicyGradientConfig, train_policy_gradient

    task, turn = start
    first = (turn.observation, tuple(turn.admissible))

    def episode(k: int, actions: list[str]) -> EpisodeRecord:
        steps = [StepRecord(t, *(first if t == 0 else (f"room {k}{t}", first[1])), a, float(t == len(actions) - 1),
                            t == len(actions) - 1, t == len(actions) - 1, True) for t, a in enumerate(actions)]
        return EpisodeRecord(f"e{k}", task.task_id, task.task_type, turn.task, "test", 0, steps)

    episodes = [episode(0, ["inventory", "look"]), episode(1, ["look", "look", "look"])]
    state = AgentState.start(turn, task.task_id)
    cfg = PolicyGradientConfig(steps=10, batch_groups=1, lr=3e-3, clip=0.2, entropy_coef=0.0, gigpo_gamma=0.5)
    moved = {}
    for gigpo in (False, True):
        model, tok = tiny()
        before = logp_of(model, tok, state, "inventory") - logp_of(model, tok, state, "look")
        train_policy_gradient(model, tok, PromptConfig(), episodes, cfg, "gigpo" if gigpo else "grpo", progress=False)
        moved[gigpo] = logp_of(model, tok, state, "inventory") - logp_of(model, tok, state, "look") - before
    assert moved[False] == pytest.approx(0.0, abs=1e-6) and moved[True] > 0.5, moved


@pytest.mark.parametrize("algo", ["grpo", "spro", "gigpo"])
def test_mini_loop_runs(algo, tmp_path, generated_tasks):
    import json

    import yaml

    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.cli import main

    model, tok = tiny()
    pi0 = save_policy(model, tok, tmp_path / "pi0", PromptConfig())
    cfg = {"algo": algo, "seed": 0, "iterations": 1,
           "tasks": {"train_dir": str(generated_tasks.train), "eval_dir": str(generated_tasks.eval),
                     "types": ["pick_and_place_simple", "look_at_obj_in_light"]},   # 2 games each: fast
           "policy0": {"path": str(pi0)},
           "rollout": {"per_task": 2, "max_steps": 3, "num_envs": 4, "workers": 2},
           "policy_gradient": {"steps": 2, "batch_groups": 2, "spro_beta": 0.1},
           "eval": {"max_steps": 3, "best_of_n": [2]}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["loop", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(run)]) == 0
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert [(r["policy"], r["best_of_n"]) for r in rows] == [("pi0", 1), ("pi1", 1)]   # no PRM: no Best-of-N
    meta = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())["policy_gradient"]
    assert meta["process_beta"] == (0.1 if algo == "spro" else 0.0) and meta["advantages"] == algo
    assert meta["reference"].endswith("policy_0") and len(meta["history"]) >= 1
    assert (meta["process_reference"].endswith("policy_0") if algo == "spro" else meta["process_reference"] is None)


def test_policy_gradient_algos_refuse_reset_exploration():
    """Groups must be π_{i-1}'s own episodes from the task start: Reset-50-50 is refused when the config loads."""
    from agentprm.errors import UserError
    from agentprm.loop.config import from_dict

    for algo in ("grpo", "spro", "gigpo"):
        with pytest.raises(UserError, match="'exploration.reset_frac' applies to algo inverse-prm; algo " + algo):
            from_dict({"algo": algo, "exploration": {"reset_frac": 0.5}})


def test_the_kl_estimate_is_zero_where_the_policies_agree_and_grows_with_the_gap():
    from agentprm.policy.policy_gradient import kl_k3

    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    assert float(kl_k3(logp, logp.detach())) == 0.0
    gaps = [float(kl_k3(logp, logp.detach() + d)) for d in (0.1, 0.5, 1.0)]
    assert 0 < gaps[0] < gaps[1] < gaps[2]
    assert float(kl_k3(logp, logp.detach() - 0.5)) > 0   # either direction
    r = 0.5   # by hand: exp(r) − r − 1 on every turn
    assert float(kl_k3(logp, logp.detach() + r)) == pytest.approx(math.exp(r) - r - 1)
    kl_k3(logp, logp.detach() + r).backward()   # the gradient raises log π where π_ref puts more mass
    assert (logp.grad < 0).all()   # d/dlogp of a loss term: descent moves logp up


def test_a_kl_penalty_holds_the_update_near_the_reference(start):
    """The same winning/losing group trained with and without kl_coef: with it, the reply the group prefers moves
    less far from π0's log-probability, and the logged KL is smaller."""
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.state import AgentState
    from agentprm.policy.policy_gradient import PolicyGradientConfig, train_policy_gradient

    task, turn = start
    state = AgentState.start(turn, task.task_id)
    episodes = [one_step_episode(task, turn, "inventory", True, 0), one_step_episode(task, turn, "look", False, 1)]
    moved, kl = {}, {}
    for coef in (0.0, 5.0):
        model, tok = tiny()
        before = logp_of(model, tok, state, "inventory")
        cfg = PolicyGradientConfig(steps=20, batch_groups=1, lr=3e-3, clip=10.0, entropy_coef=0.0, kl_coef=coef)
        history = train_policy_gradient(model, tok, PromptConfig(), episodes, cfg, progress=False)
        moved[coef], kl[coef] = logp_of(model, tok, state, "inventory") - before, history[-1]["kl_ref"]
    assert moved[0.0] > moved[5.0] > 0, moved
    assert kl[0.0] > kl[5.0] >= 0, kl
