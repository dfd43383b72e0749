"""Stage-2 PRM: hand-computed losses and metrics, batched == single scores, save/load, init from a policy folder,
the by-task split, training on synthetic targets, and one-line errors for bad targets."""
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
from agentprm.agent.replay import episode_states
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.cli import main
from agentprm.data.trajectories import EpisodeRecord, StepRecord, write_episodes_file
from agentprm.errors import UserError
from agentprm.models import build_model
from agentprm.prm import (PRM_LOSSES, PrmDataConfig, ProcessRewardModel, get_prm_loss, register_prm_loss,
                          split_by_task, train_prm)
from agentprm.data.tables import write_with_info
from agentprm.prm.losses import advantage, bradley_terry, plackett_luce, soft_bce
from agentprm.prm.metrics import bce, pairwise_accuracy, spearman
from agentprm.targets.mc import targets_from_rollouts
from agentprm.train.config import TrainConfig

torch.set_num_threads(1)

START = "You are in the middle of a room. Looking quickly around you, you see a drawer 1, and a cabinet 1."
AT_DRAWER = "You arrive at drawer 1. On the drawer 1, you see a apple 1."


def episodes_for(task_id: str, n: int = 10) -> list[EpisodeRecord]:
    """At the drawer, "take apple 1" wins 9 times in 10 and "look" once in 10: Q̂ 0.9 and 0.1."""
    out = []
    for action in ("take apple 1", "look"):
        for i in range(n):
            won = (i < 9) if action == "take apple 1" else (i < 1)
            steps = [StepRecord(0, START, (), "go to drawer 1"),
                     StepRecord(1, AT_DRAWER, (), action, reward=float(won), done=True, won=won)]
            out.append(EpisodeRecord(f"{task_id}-{action[:4]}-{i}", task_id, "pick_and_place_simple",
                                     "put some apple on cabinet.", "synthetic", i, steps))
    return out


@pytest.fixture(scope="module")
def targets_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("prm")
    rollouts = write_episodes_file(root / "rollouts.parquet", [e for t in range(4) for e in episodes_for(f"t{t}")])
    targets = targets_from_rollouts(rollouts, gamma=1.0)
    return write_with_info(root / "q.parquet", targets.table, targets.info)


@pytest.fixture(scope="module")
def states_and_replies():
    episode = episodes_for("t0", n=1)
    pairs = [sp for e in episode for sp in episode_states(e)]
    return [s for s, _ in pairs], [r for _, r in pairs]


def test_soft_bce_matches_hand_computation():
    logits, q = torch.tensor([0.0, math.log(3.0)]), torch.tensor([0.5, 0.25])  # σ = 0.5, 0.75
    expected = (math.log(2) + -(0.25 * math.log(0.75) + 0.75 * math.log(0.25))) / 2
    assert soft_bce(logits, q).item() == pytest.approx(expected, rel=1e-6)


def test_bradley_terry_matches_hand_computation():
    chosen, rejected = torch.tensor([2.0, 0.0, 30.0]), torch.tensor([1.0, 0.0, -30.0])  # gaps 1, 0, 60
    expected = (math.log(1 + math.exp(-1)) + math.log(2) + math.log1p(math.exp(-60))) / 3
    assert bradley_terry(chosen, rejected).item() == pytest.approx(expected, rel=1e-6)


def test_plackett_luce_matches_hand_computation():
    f, q = torch.tensor([2.0, 1.0, 0.0, -1.0]), torch.tensor([1.0, 0.5, 0.5, 0.0])
    lse = lambda *xs: math.log(sum(math.exp(x) for x in xs))  # noqa: E731
    # reply 0 beats 1, 2, 3; replies 1 and 2 (tied: never asked to beat each other) beat 3; reply 3 beats nothing
    want = [lse(2, 1, 0, -1) - 2, lse(1, -1) - 1, lse(0, -1) - 0]
    assert plackett_luce(f, q).tolist() == pytest.approx(want, rel=1e-6)
    assert plackett_luce(f, q, delta=0.6).tolist() == pytest.approx([lse(2, -1) - 2], rel=1e-6)  # only 1.0 vs 0.0
    assert plackett_luce(f, torch.full((4,), 0.5)).numel() == 0     # a state of ties has nothing to learn
    two = plackett_luce(torch.tensor([0.3, 1.2]), torch.tensor([0.9, 0.1]))   # two replies: Bradley-Terry
    assert two.item() == pytest.approx(bradley_terry(torch.tensor([0.3]), torch.tensor([1.2])).item(), rel=1e-6)


def test_advantage_loss_matches_hand_computation():
    # σ(f) = 0.5, 0.5, 0.8: the critic's advantages −0.1, −0.1, +0.2; the targets' (Q̂ 1, 0, 0.5) +0.5, −0.5, 0
    f, q = torch.tensor([0.0, 0.0, math.log(4.0)]), torch.tensor([1.0, 0.0, 0.5])
    assert advantage(f, q).tolist() == pytest.approx([0.6 ** 2, 0.4 ** 2, 0.2 ** 2], rel=1e-6)
    # a critic whose Q is the targets' shifted by a constant has the same advantages: nothing to learn
    fitted = torch.logit(torch.tensor([0.6, 0.2, 0.45]))
    assert advantage(fitted, torch.tensor([0.7, 0.3, 0.55])).tolist() == pytest.approx([0, 0, 0], abs=1e-12)
    # the gradient raises the reply the targets favour and lowers the one they do not, by the gap's size
    f = torch.zeros(2, requires_grad=True)
    advantage(f, torch.tensor([0.9, 0.1])).sum().backward()
    small = torch.zeros(2, requires_grad=True)
    advantage(small, torch.tensor([0.51, 0.49])).sum().backward()
    assert f.grad[0] < small.grad[0] < 0 < small.grad[1] < f.grad[1]
    assert get_prm_loss("advantage").kind == "listwise"


def test_packed_logits_equal_one_sequence_per_reply_with_gradients(states_and_replies):
    states = states_and_replies[0][:2]    # the start and the drawer
    prm = ProcessRewardModel.init("tiny", seed=0)
    torch.nn.init.normal_(prm.lm.score.weight, std=1.0, generator=torch.Generator().manual_seed(0))
    prompts = [prompt_ids(prm.tokenizer, s, prm.prompt) for s in states]
    replies = [[reply_ids(prm.tokenizer, r) for r in ("take apple 1", "look", "go to cabinet 1 and look")],
               [reply_ids(prm.tokenizer, "inventory")]]
    packed = torch.cat(prm.logits_packed(prompts, replies))
    plain = prm.logits_of([p + r for p, rs in zip(prompts, replies) for r in rs])
    assert packed.shape == (4,) and packed.std() > 0.1
    torch.testing.assert_close(packed, plain, atol=1e-5, rtol=0)
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0])
    grad = lambda logits: torch.autograd.grad((logits * weights).sum(), prm.lm.model.embed_tokens.weight)[0]  # noqa: E731
    torch.testing.assert_close(grad(packed), grad(plain), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="2 prompts but 1 reply lists"):
        prm.logits_packed(prompts, replies[:1])
    scored = prm.score_packed(prompts, replies, batch_size=1)
    torch.testing.assert_close(torch.cat(scored), plain.detach(), atol=1e-5, rtol=0)


def test_loss_registry():
    assert get_prm_loss("soft-bce").fn is soft_bce and not get_prm_loss("soft-bce").pairwise
    assert get_prm_loss("bradley-terry").pairwise
    with pytest.raises(UserError, match="unknown PRM loss 'nope'"):
        get_prm_loss("nope")
    assert get_prm_loss("pqm").kind == "trajectory"
    register_prm_loss("test-mse")(lambda logits, q: ((torch.sigmoid(logits) - q) ** 2).mean())
    try:
        assert get_prm_loss("test-mse").fn(torch.zeros(1), torch.ones(1)).item() == 0.25
        with pytest.raises(ValueError, match="'test-mse' is registered already"):   # never silently replaced
            register_prm_loss("test-mse")(soft_bce)
        assert get_prm_loss("test-mse").fn is not soft_bce
    finally:
        del PRM_LOSSES["test-mse"]
    with pytest.raises(ValueError, match="kind must be one of"):
        register_prm_loss("test-odd", kind="setwise")


def test_train_prm_with_the_pqm_loss_ranks_the_winning_step_above_the_losing_one(targets_file, tmp_path,
                                                                                states_and_replies):
    """`train-prm --loss pqm`: whole train-task episodes as examples. No step has Q̂ 0, so a lost episode errs at its
    last step: "look" is wrong in 9 of its 10 episodes, "take apple 1" in 1 of 10 — PQM ranks take above look."""
    metrics = train_prm(targets_file, "tiny", "pqm", tmp_path / "prm",
                        TrainConfig(lr=3e-3, epochs=3, batch_size=4, seed=0))
    assert metrics["examples"] == 3 * 20   # 3 of the 4 tasks are train tasks, 20 episodes each, all covered
    assert metrics["history"] and all("ranked_frac" in h for h in metrics["history"])
    prm = ProcessRewardModel.load(tmp_path / "prm")
    states, replies = states_and_replies
    at_drawer = states[1]
    assert replies[1] == "take apple 1" and states[3].key() == at_drawer.key()
    take, look = prm.score([at_drawer, at_drawer], ["take apple 1", "look"]).tolist()
    assert take > look


def test_metrics_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([4, 3, 2, 1], [10, 20, 30, 40]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)  # average ranks for ties
    assert spearman([1, 1], [1, 2]) is None
    assert bce([0.5], [1.0]) == pytest.approx(math.log(2))
    # state s: targets order a > b > c; pred gets (a, b) right, (a, c) tied, (b, c) wrong; state u has one row
    acc, n = pairwise_accuracy([0.9, 0.1, 0.9, 0.5], [1.0, 0.5, 0.0, 0.7], ["s", "s", "s", "u"])
    assert (acc, n) == (pytest.approx(1.5 / 3), 3)
    assert pairwise_accuracy([0.9, 0.1, 0.9], [1.0, 0.5, 0.0], ["s"] * 3, delta=0.6) == (0.5, 1)


def test_score_batched_equals_one_at_a_time_and_in_unit_interval(states_and_replies):
    states, replies = states_and_replies
    prm = ProcessRewardModel.init("tiny", seed=0)
    states, replies = states + states, replies + ["inventory", "go to cabinet 1 and then look around"] * 2
    batched = prm.score(states, replies)
    single = torch.cat([prm.score([s], [r]) for s, r in zip(states, replies)])
    assert batched.shape == (len(states),) and ((batched > 0) & (batched < 1)).all()
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=0)


def test_save_load_gives_identical_scores_and_replaces_atomically(states_and_replies, tmp_path):
    states, replies = states_and_replies
    prm = ProcessRewardModel.init("tiny", seed=1)
    out = tmp_path / "prm"
    out.mkdir()
    (out / "stale.txt").write_text("old run")
    with pytest.raises(UserError, match="did not write"):   # not agentprm's: never replaced
        prm.save(out, loss="soft-bce")
    assert (out / "stale.txt").read_text() == "old run"
    (out / "agentprm.json").write_text("{}")   # a copied agentprm.json proves nothing
    with pytest.raises(UserError, match="did not write"):
        prm.save(out, loss="soft-bce")
    assert sorted(p.name for p in out.iterdir()) == ["agentprm.json", "stale.txt"]
    for p in out.iterdir():
        p.unlink()
    prm.save(out, loss="soft-bce")
    prm.save(out, loss="soft-bce")   # an earlier agentprm output, as it wrote it: replaced whole
    assert (out / "model.safetensors").exists()
    assert json.loads((out / "agentprm.json").read_text())["kind"] == "prm"
    assert [p.name for p in tmp_path.iterdir()] == ["prm"]  # no temp folders left behind
    loaded = ProcessRewardModel.load(out)
    assert torch.equal(loaded.score(states, replies), prm.score(states, replies))
    with pytest.raises(UserError, match="not a PRM folder"):
        ProcessRewardModel.load(tmp_path)


def test_init_from_policy_folder_keeps_backbone_and_prompt(tmp_path):
    tok = build_tokenizer()
    policy = build_model("tiny", tok, seed=3)
    policy.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    PromptConfig(show_admissible=True).save(tmp_path, kind="policy")
    prm = ProcessRewardModel.init(tmp_path, seed=0)
    assert prm.prompt.show_admissible
    w = "model.embed_tokens.weight"
    assert torch.equal(prm.lm.state_dict()[w], policy.state_dict()[w])
    with pytest.raises(UserError, match="neither a model folder nor a preset"):
        ProcessRewardModel.init(tmp_path / "missing")


def test_whole_tasks_keeps_a_seeded_set_of_whole_tasks_within_the_limit():
    from agentprm.prm.train import whole_tasks

    tasks = ["a"] * 3 + ["b"] * 2 + ["c"] * 4 + ["d"]
    rows = np.arange(len(tasks))
    assert (whole_tasks(rows, tasks, None, 0) == rows).all() and (whole_tasks(rows, tasks, 10, 0) == rows).all()
    for seed in range(6):
        kept = whole_tasks(rows, tasks, 5, seed)
        names = {tasks[i] for i in kept}
        assert 0 < len(kept) <= 5 and list(kept) == sorted(kept)
        assert all(tasks.count(t) == sum(tasks[i] == t for i in kept) for t in names)   # no task cut in two
        assert (whole_tasks(rows, tasks, 5, seed) == kept).all()
    assert len({tuple(whole_tasks(rows, tasks, 5, seed)) for seed in range(6)}) > 1       # the seed draws the tasks
    assert len(whole_tasks(rows, tasks, 1, 0)) >= 1                                       # at least one task


def test_split_by_task_has_no_task_in_both_halves():
    tasks = [f"t{i % 7}" for i in range(50)]
    held = split_by_task(tasks, 0.3, seed=0)
    held_tasks = {t for t, h in zip(tasks, held) if h}
    train_tasks = {t for t, h in zip(tasks, held) if not h}
    assert held_tasks and train_tasks and not held_tasks & train_tasks and len(held_tasks) == 2
    assert (split_by_task(tasks, 0.3, seed=0) == held).all()
    assert split_by_task(["a", "b"], 0.01, seed=0).sum() == 1 and not split_by_task(["a", "a"], 0.5, seed=0).any()


def test_soft_bce_training_lowers_loss_and_ranks_targets(targets_file, tmp_path):
    cfg = TrainConfig(lr=3e-3, epochs=12, batch_size=9, seed=0, log_every=1000)
    metrics = train_prm(targets_file, "tiny", "soft-bce", tmp_path / "prm", cfg)
    train, initial = metrics["final"]["train"], metrics["initial"]["train"]
    assert metrics["tasks"] == {"train": 3, "heldout": 1}
    assert train["bce"] < initial["bce"] and train["spearman"] > 0.5
    assert train["pairwise_accuracy"] == 1.0 and train["pairs"] == 3
    assert json.loads((tmp_path / "prm" / "agentprm.json").read_text())["loss"] == "soft-bce"


def test_cli_bradley_terry_learns_the_preference(targets_file, tmp_path):
    summary = tmp_path / "s.json"
    assert main(["train-prm", "--targets", str(targets_file), "--init", "tiny", "--loss", "bradley-terry",
                 "--out", str(tmp_path / "prm"), "--epochs", "10", "--lr", "3e-3", "--batch-size", "3",
                 "--json", str(summary)]) == 0
    metrics = json.loads(summary.read_text())
    assert metrics["examples"] == 3 and metrics["final"]["train"]["pairwise_accuracy"] == 1.0
    assert metrics["final"]["heldout"]["pairs"] == 1 and "provenance" in metrics


def test_cli_max_steps_stops_the_prm_before_its_epochs_and_the_loop_reads_it(targets_file, tmp_path):
    summary = tmp_path / "s.json"
    assert main(["train-prm", "--targets", str(targets_file), "--init", "tiny", "--out", str(tmp_path / "prm"),
                 "--epochs", "10", "--batch-size", "3", "--max-steps", "4", "--eval-rows", "1",
                 "--json", str(summary)]) == 0
    metrics = json.loads(summary.read_text())
    assert metrics["examples"] > 3 * 4 / 10                                  # 10 epochs would be more than 4 steps
    assert metrics["history"][-1]["step"] == 4 and metrics["train_config"]["max_steps"] == 4
    assert 1 <= metrics["evaluated_rows"]["train"] < metrics["examples"]     # one whole task of the train half
    assert metrics["final"]["train"]["n"] == metrics["evaluated_rows"]["train"]
    from agentprm.loop.config import load_config
    config = tmp_path / "loop.yaml"
    config.write_text("prm: {max_steps: 300}\n")
    assert load_config(config).prm.train_config(0).max_steps == 300


def test_bad_targets_give_one_line_errors(targets_file, tmp_path, capsys):
    table = pq.read_table(targets_file)
    missing = tmp_path / "no_q.parquet"
    pq.write_table(table.drop_columns(["q"]), missing)
    with pytest.raises(UserError, match=r"no_q\.parquet: missing column 'q'"):
        train_prm(missing, "tiny", "soft-bce", tmp_path / "prm")
    assert main(["train-prm", "--targets", str(missing), "--init", "tiny", "--out", str(tmp_path / "prm")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no_q.parquet" in err and "'q'" in err
    other = tmp_path / "other.parquet"
    pq.write_table(table.set_column(table.column_names.index("state_key"), "state_key",
                                    pa.array(["0" * 64] * table.num_rows)).replace_schema_metadata(
        table.schema.metadata), other)
    with pytest.raises(UserError, match="has another history"):
        train_prm(other, "tiny", "soft-bce", tmp_path / "prm")
    assert not (tmp_path / "prm").exists()


def test_plackett_luce_training_orders_each_state_s_replies(targets_file, tmp_path):
    cfg = TrainConfig(lr=3e-3, epochs=10, batch_size=3, seed=0, log_every=1)
    metrics = train_prm(targets_file, "tiny", "plackett-luce", tmp_path / "prm", cfg)
    assert metrics["examples"] == 3        # one per train state with replies the targets tell apart (3 train tasks)
    assert metrics["final"]["train"]["pairwise_accuracy"] == 1.0 and metrics["final"]["heldout"]["pairs"] == 1
    assert metrics["history"][0]["pair_acc"] < 1.0 and metrics["history"][-1]["pair_acc"] == 1.0
    with pytest.raises(UserError, match="no states for loss 'plackett-luce'"):
        train_prm(targets_file, "tiny", "plackett-luce", tmp_path / "prm2", cfg, data=PrmDataConfig(delta=0.9))


def test_bradley_terry_without_pairs_is_a_user_error(targets_file, tmp_path):
    with pytest.raises(UserError, match="no pairs for loss 'bradley-terry'"):
        train_prm(targets_file, "tiny", "bradley-terry", tmp_path / "prm", data=PrmDataConfig(delta=0.9))
