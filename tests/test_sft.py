"""SFT: reply-only loss mask, loss goes down on a few demos, the saved folder is a plain HF folder that
LMAgent.load and AutoModelForCausalLM read, and saving replaces an old folder without leftovers."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentprm.agent.encoding import CONFIG_FILE, PromptConfig, prompt_ids, reply_ids
from agentprm.agent.lm import LMAgent
from agentprm.agent.policies import ExpertAgent
from agentprm.agent.replay import episode_states
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.data.trajectories import write_episodes_file
from agentprm.errors import UserError
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.errors import UserError
from agentprm.policy.sft import IGNORE, SFTConfig, load_demos, make_examples, renumbered, train_sft
from agentprm.rollout.engine import episode_jobs, run_episodes

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def demos(generated_tasks, tmp_path_factory):
    tasks = load_tasks(generated_tasks.train)[:3]
    episodes = run_episodes(episode_jobs(tasks, 1, 0, 200, "expert"), ExpertAgent(), num_envs=3, num_workers=1,
                            progress=False)
    assert all(e.won for e in episodes)
    return write_episodes_file(tmp_path_factory.mktemp("demos") / "demos.parquet", episodes)


@pytest.fixture(scope="module")
def trained(demos, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "pi0"
    cfg = SFTConfig(epochs=3, batch_size=8, lr=3e-3, prompt=PromptConfig(history_turns=1))
    return out, cfg, train_sft(demos, out, cfg, progress=False)


def test_loss_is_on_reply_tokens_only(demos):
    tok, cfg = build_tokenizer(), PromptConfig()
    episodes = load_demos(demos, SFTConfig())
    examples = make_examples(tok, episodes[:1], cfg)
    pairs = list(episode_states(episodes[0]))
    assert len(examples) == len(pairs)
    for ex, (state, reply) in zip(examples, pairs):
        p, r = prompt_ids(tok, state, cfg), reply_ids(tok, reply)
        assert ex.input_ids == p + r
        assert ex.labels == [IGNORE] * len(p) + r
        assert tok.decode([t for t in ex.labels if t != IGNORE], skip_special_tokens=True) == reply
        assert r[-1] == tok.eos_token_id


def test_loss_decreases(trained):
    _, _, metrics = trained
    curve = [row["loss"] for row in metrics["loss_curve"]]
    assert curve[-1] < 0.8 * curve[0]
    assert metrics["steps"] == metrics["planned_steps"] == metrics["loss_curve"][-1]["step"]
    assert metrics["examples"] > 0 and metrics["train_seconds"] > 0


def test_saved_folder_is_plain_hf_and_loads_as_agent(trained):
    out, cfg, _ = trained
    assert (out / "model.safetensors").exists()
    model, tok = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    assert tok("open drawer 1")["input_ids"] == build_tokenizer()("open drawer 1")["input_ids"]
    assert model.config.vocab_size == len(tok)
    saved = json.loads((out / CONFIG_FILE).read_text())
    assert saved["sft"]["metrics"]["examples"] > 0
    agent = LMAgent.load(out)
    assert agent.prompt_cfg == cfg.prompt
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp folders left behind


def test_a_preset_reads_the_demos_own_words_and_alfworld_demos_add_none(trained, tmp_path):
    out, _, _ = trained
    assert AutoTokenizer.from_pretrained(out).get_vocab() == build_tokenizer().get_vocab()   # the bundled recipe's
    from agentprm.data.trajectories import EpisodeRecord, StepRecord

    steps = [StepRecord(0, "This room is called the kitchen. You see a thermometer and a beaker.",
                        ("focus on thermometer", "pick up beaker", "look around"), "focus on thermometer",
                        reward=1.0, done=True, won=True)]
    other = write_episodes_file(tmp_path / "sw.parquet", [EpisodeRecord("sw-0", "sw-boil-0", "boil",
                                                                        "Your task is to boil water.", "gold", 0, steps)])
    train_sft(other, tmp_path / "pi", SFTConfig(steps=1, epochs=0, batch_size=1, renumber_copies=0), progress=False)
    tok = AutoTokenizer.from_pretrained(tmp_path / "pi")
    ids = tok("thermometer beaker boil kitchen", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and len(ids) == 4 and len(tok) > len(build_tokenizer())


def test_saving_again_replaces_the_folder(demos, trained):
    out, cfg, _ = trained
    (out / "stale.txt").write_text("old")   # not agentprm's: the folder is the user's now
    with pytest.raises(UserError, match="stale.txt, which agentprm did not write"):
        train_sft(demos, out, SFTConfig(epochs=0.1, batch_size=8), progress=False)
    assert (out / "stale.txt").read_text() == "old"
    (out / "stale.txt").unlink()
    train_sft(demos, out, SFTConfig(epochs=0.1, batch_size=8), progress=False)
    assert (out / "model.safetensors").exists()
    assert LMAgent.load(out).prompt_cfg == PromptConfig()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]


def test_renumbered_copies_stay_consistent(demos):
    import random

    episode = load_demos(demos, SFTConfig(renumber_copies=0))[0]
    copy = renumbered(episode, random.Random(0), 0)
    assert [s.action for s in copy.steps] != [s.action for s in episode.steps]
    for step in copy.steps:
        assert step.action in step.admissible
    plain = len(load_demos(demos, SFTConfig(renumber_copies=0)))
    assert len(load_demos(demos, SFTConfig(renumber_copies=2))) == 3 * plain
    assert len(load_demos(demos, SFTConfig())) == 2 * plain          # the default: one renumbered copy


def test_no_usable_demos_is_a_user_error(tmp_path):
    empty = write_episodes_file(tmp_path / "none.parquet", [])
    with pytest.raises(UserError, match="no usable demonstrations"):
        train_sft(empty, tmp_path / "out", SFTConfig())


def test_a_recipe_too_small_for_a_from_scratch_preset_is_said():
    from agentprm.policy.sft import recipe_warning

    assert "6 demo games and 40 steps" in recipe_warning(SFTConfig(model="tiny"), 6, 40)
    assert recipe_warning(SFTConfig(model="tiny"), 479, 6150) == ""
    assert "500 steps" in recipe_warning(SFTConfig(model="tiny"), 479, 500)
    assert recipe_warning(SFTConfig(model="/some/hf/folder"), 6, 40) == ""   # fine-tuning a real LM: not this recipe


def test_the_default_schedule_is_the_recipe_a_step_count_with_renumbered_copies():
    """`agentprm sft` with no flags trains the recipe that worked (steps, not passes), whatever the data
    size; --epochs > 0 still counts passes instead."""
    from agentprm.train.core import num_steps

    cfg = SFTConfig()
    assert (cfg.steps, cfg.epochs, cfg.renumber_copies, cfg.model) == (6000, 0.0, 1, "tiny")
    assert num_steps(500, cfg.train_config(0)) == num_steps(50_000, cfg.train_config(0)) == 6000
    assert num_steps(500, SFTConfig(epochs=2.0, batch_size=10).train_config(0)) == 100


def test_a_step_count_trains_exactly_that_many_steps(demos, tmp_path):
    metrics = train_sft(demos, tmp_path / "out", SFTConfig(steps=7, batch_size=32, renumber_copies=0), progress=False)
    assert metrics["steps"] == metrics["planned_steps"] == 7 and metrics["examples"] < 7 * 32   # several passes


@pytest.fixture(scope="module")
def twelve_games(generated_tasks, tmp_path_factory):
    """Expert demos of 12 games (the train and eval splits together): enough for a validation split."""
    tasks = load_tasks(generated_tasks.train) + load_tasks(generated_tasks.eval)
    episodes = run_episodes(episode_jobs(tasks, 1, 0, 200, "expert"), ExpertAgent(), num_envs=6, num_workers=1,
                            progress=False)
    return write_episodes_file(tmp_path_factory.mktemp("demos12") / "demos.parquet", episodes)


def test_validation_holds_out_whole_games_drawn_by_the_seed(twelve_games, demos):
    from agentprm.policy.sft import split_games, usable_demos

    episodes = usable_demos(twelve_games, SFTConfig())
    train, val = split_games(episodes, 0.25, seed=1)
    assert len({e.task_id for e in val}) == 3 and len(train) + len(val) == len(episodes) == 12
    assert not {e.task_id for e in train} & {e.task_id for e in val}
    assert split_games(episodes, 0.25, seed=1) == (train, val)
    assert {e.task_id for e in split_games(episodes, 0.25, seed=2)[1]} != {e.task_id for e in val}   # 220 draws
    assert split_games(episodes, 0.0, seed=1) == (episodes, [])     # val_frac 0: every game trained on, in order
    few = usable_demos(demos, SFTConfig())                          # 3 games: below VAL_MIN_GAMES none is held out
    assert split_games(few, 0.5, seed=0) == (few, [])


def test_next_command_accuracy_tells_a_working_policy_from_an_untrained_one(twelve_games, tiny_policy):
    from agentprm.policy.sft import command_states, next_command_accuracy, usable_demos

    pairs = command_states(usable_demos(twelve_games, SFTConfig()))
    assert len(pairs) > 60 and all(command in state.admissible for state, command in pairs)
    assert len(command_states(usable_demos(twelve_games, SFTConfig()), limit=10)) == 10
    scores = {}
    for name, folder in (("bundled", "agentprm/assets/policy"), ("untrained", tiny_policy)):
        agent = LMAgent.load(folder)
        scores[name] = next_command_accuracy(agent.backend.model, agent.tokenizer, agent.prompt_cfg, pairs)
    assert scores["bundled"] > 0.8 > 0.3 > scores["untrained"], scores


def test_sft_reports_held_out_accuracy_of_the_weights_it_saved(twelve_games, tmp_path):
    """The record's accuracy is that of the saved folder, measured again after loading it; with keep_best the
    saved weights are the best measurement's, not the last's."""
    from agentprm.policy.sft import command_states, next_command_accuracy, split_games, usable_demos

    for keep_best in (False, True):
        cfg = SFTConfig(steps=30, batch_size=8, lr=3e-3, renumber_copies=0, val_frac=0.25, val_every=6,
                        keep_best=keep_best, prompt=PromptConfig(history_turns=1))
        out = tmp_path / f"pi0-{keep_best}"
        val = train_sft(twelve_games, out, cfg, seed=0, progress=False)["validation"]
        assert val["games"] == 3 and [p["step"] for p in val["curve"]] == [6, 12, 18, 24, 30]
        best = max(val["curve"], key=lambda p: p["accuracy"])
        assert val["best"]["accuracy"] == best["accuracy"]
        assert val["saved_step"] == (val["best"]["step"] if keep_best else 30)
        held_out = command_states(split_games(usable_demos(twelve_games, cfg), 0.25, seed=0)[1])
        agent = LMAgent.load(out)
        again = next_command_accuracy(agent.backend.model, agent.tokenizer, agent.prompt_cfg, held_out)
        assert val["states"] == len(held_out) and round(again, 4) == val["accuracy"]
        record = json.loads((out / CONFIG_FILE).read_text())["sft"]["metrics"]["validation"]
        assert record["accuracy"] == val["accuracy"]


def test_a_policy_below_the_accuracy_bar_or_memorising_is_warned_about():
    from agentprm.policy.sft import VAL_ACCURACY_WARN, accuracy_warning

    assert accuracy_warning(0.91, 0.93) == ""
    assert "below" in accuracy_warning(VAL_ACCURACY_WARN - 0.01, VAL_ACCURACY_WARN)
    assert "memorised" in accuracy_warning(0.88, 0.99)
