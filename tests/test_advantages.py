"""GRPO and SPRO advantages against hand-computed values; β = 0 is exactly GRPO."""
from __future__ import annotations

import math

import pytest
import torch

from agentprm.policy.advantages import (cumulative_process_rewards, group_outcome_advantages, masked_step_advantages,
                                        pad_steps, per_token_layout, spro_advantages)


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


def test_process_rewards_are_detached():
    lr = torch.tensor([[1.0, 2.0], [0.5, 0.5]], requires_grad=True)
    adv = spro_advantages(torch.tensor([1.0, 0.0]), lr, torch.ones(2, 2), beta=0.1)
    assert not adv.requires_grad


def test_per_token_layout_concatenates_turns():
    values, mask = per_token_layout([[[0.1, 0.2], [0.3]], [[1.0]]])
    assert torch.allclose(values, torch.tensor([[0.1, 0.2, 0.3], [1.0, 0.0, 0.0]]))
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]


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
    cfg = PolicyGradientConfig(entropy_coef=0.0)
    grpo, _ = PolicyGradientLoss(cfg, tok.pad_token_id, process_beta=0.0)(model, groups)
    spro, _ = PolicyGradientLoss(cfg, tok.pad_token_id, process_beta=0.5)(model, groups)
    assert torch.equal(grpo.detach(), spro.detach())


def test_groups_drop_lone_and_failed_episodes(start):
    from agentprm.agent.encoding import PromptConfig
    from agentprm.policy.policy_gradient import encode_groups

    task, turn = start
    lone = one_step_episode(task, turn, "look", True, 0)
    failed = one_step_episode(task, turn, "look", False, 1)
    failed.error = "worker died"
    _, tok = tiny()
    assert encode_groups([lone, failed], tok, PromptConfig()) == []


@pytest.mark.parametrize("algo", ["grpo", "spro"])
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
    assert meta["process_beta"] == (0.1 if algo == "spro" else 0.0)
    assert meta["reference"].endswith("policy_0") and len(meta["history"]) >= 1


def test_policy_gradient_algos_refuse_reset_exploration():
    """Groups must be π_{i-1}'s own episodes from the task start: Reset-50-50 is refused when the config loads."""
    from agentprm.errors import UserError
    from agentprm.loop.config import from_dict

    for algo in ("grpo", "spro"):
        with pytest.raises(UserError, match="'exploration.reset_frac' applies to algo inverse-prm; algo " + algo):
            from_dict({"algo": algo, "exploration": {"reset_frac": 0.5}})
