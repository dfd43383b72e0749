"""`agentprm rollout` / `eval` / `sft` end to end: shards readable, eval JSON fields, one-line errors."""
import json

import pytest
import torch

from agentprm.agent.encoding import PromptConfig
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.cli import main
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.models import build_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("policy") / "tiny-untrained"
    tok = build_tokenizer()
    build_model("tiny", tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    PromptConfig().save(folder)
    return folder


def test_rollout_writes_readable_shards(policy_dir, generated_tasks, tmp_path):
    out, summary = tmp_path / "rollouts", tmp_path / "r.json"
    rc = main(["rollout", "--policy", str(policy_dir), "--tasks", str(generated_tasks.train), "--per-task", "1",
               "--out", str(out), "--seed", "1", "--max-steps", "3", "--workers", "1", "--json", str(summary)])
    assert rc == 0
    episodes = list(iter_episodes(read_trajectories(out)))
    assert len(episodes) == generated_tasks.num
    assert all(e.policy == "tiny-untrained" and e.seed == 1 and len(e.steps) == 3 for e in episodes)
    assert all(s.admissible_action for e in episodes for s in e.steps)   # choose mode
    assert json.loads(summary.read_text())["episodes"] == generated_tasks.num


def test_an_interrupted_rollout_resumes_with_only_the_missing_episodes(policy_dir, generated_tasks, tmp_path,
                                                                        monkeypatch, capsys):
    """shards are flushed every few rows, so a kill costs at most the unflushed episodes, and --resume plays
    exactly those; without --resume an existing rollout is refused, and one of other tasks/seed is never mixed in."""
    from agentprm.commands import rollout

    monkeypatch.setattr(rollout, "SHARD_ROWS", 6)   # a shard every two 3-step episodes
    out = tmp_path / "rollouts"
    argv = ["rollout", "--policy", str(policy_dir), "--tasks", str(generated_tasks.train), "--per-task", "2",
            "--out", str(out), "--seed", "1", "--max-steps", "3", "--workers", "1"]
    assert main(argv) == 0
    shards = sorted(out.glob("*.parquet"))
    full = {e.episode_id: e for e in iter_episodes(read_trajectories(out))}
    assert len(shards) > 2 and len(full) == 2 * generated_tasks.num
    lost = {e.episode_id for e in iter_episodes(read_trajectories(shards[-1]))}
    shards[-1].unlink()                                       # killed before its last shard was written
    assert main(argv) == 2 and "pass --resume" in capsys.readouterr().err
    assert main([*argv, "--resume", "--json", str(tmp_path / "r.json")]) == 0
    again = {e.episode_id: e for e in iter_episodes(read_trajectories(out))}   # no duplicate: turns check passes
    assert set(again) == set(full) and json.loads((tmp_path / "r.json").read_text())["resumed"] == len(full) - len(lost)
    assert all(again[i].steps == full[i].steps for i in set(full) - lost)          # kept as they were
    assert main([*argv[:-6], "--seed", "2", "--max-steps", "3", "--workers", "1", "--resume"]) == 2
    assert "would not play" in capsys.readouterr().err


def test_a_larger_per_task_with_resume_adds_samples_and_keeps_the_old(policy_dir, generated_tasks, tmp_path):
    """More rollouts per task on the same games (docs/results.md's 30k point: 4 per game extended to 10): --resume
    with a larger --per-task plays only the new samples k = old..new-1 of every task and leaves the old ones as
    they were; the targets of the whole folder then average over all of them."""
    out = tmp_path / "rollouts"
    argv = ["rollout", "--policy", str(policy_dir), "--tasks", str(generated_tasks.train), "--out", str(out),
            "--seed", "1", "--max-steps", "3", "--workers", "1"]
    assert main([*argv, "--per-task", "1"]) == 0
    first = {e.episode_id: e for e in iter_episodes(read_trajectories(out))}
    assert main([*argv, "--per-task", "3", "--resume", "--json", str(tmp_path / "r.json")]) == 0
    both = {e.episode_id: e for e in iter_episodes(read_trajectories(out))}
    assert len(first) == generated_tasks.num and len(both) == 3 * generated_tasks.num
    assert json.loads((tmp_path / "r.json").read_text())["resumed"] == len(first)
    assert all(both[i].steps == first[i].steps for i in first)
    assert sorted({i.rsplit("-", 1)[1] for i in set(both) - set(first)}) == ["1", "2"]
    assert main(["targets", "mc", "--rollouts", str(out), "--out", str(tmp_path / "t.parquet")]) == 0


def test_eval_json_has_rate_ci_and_provenance(generated_tasks, tmp_path):
    path = tmp_path / "eval.json"
    rc = main(["eval", "--policy", "expert", "--tasks", str(generated_tasks.eval), "--seed", "0",
               "--workers", "1", "--json", str(path), "--episodes", str(tmp_path / "episodes.parquet")])
    assert rc == 0
    s = json.loads(path.read_text())
    assert s["episodes"] == generated_tasks.num and s["successes"] > 0
    lo, hi = s["ci95"]
    assert lo <= s["success_rate"] <= hi and lo < hi
    assert set(s["by_type"]) and s["mean_turns"] > 0
    assert s["policy"] == "expert" and s["provenance"]["seed"] == 0
    # --episodes: the episodes behind the summary, turn by turn
    episodes = list(iter_episodes(read_trajectories(tmp_path / "episodes.parquet")))
    assert {e.task_id: [int(e.won), 1] for e in episodes} == s["per_task"]
    assert sum(len(e.steps) for e in episodes) / len(episodes) == pytest.approx(s["mean_turns"])
    assert sum(st.reward for e in episodes for st in e.steps) / len(episodes) == pytest.approx(s["mean_return"])
    assert s["mean_return"] == pytest.approx(s["success_rate"])   # ALFWorld rewards the win alone
    assert all(e.policy == "expert" and e.steps[-1].done for e in episodes)


@pytest.mark.parametrize("command", ["eval", "rollout"])
def test_bad_policy_folder_is_a_one_line_error(command, generated_tasks, tmp_path, capsys):
    argv = [command, "--policy", str(tmp_path / "missing"), "--tasks", str(generated_tasks.eval)]
    rc = main(argv + (["--out", str(tmp_path / "o")] if command == "rollout" else []))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "missing" in err


def test_sft_command_writes_policy_and_metrics(generated_tasks, tmp_path):
    demos = tmp_path / "demos.parquet"
    assert main(["demos", "--tasks", str(generated_tasks.train), "--out", str(demos), "--types",
                 "pick_and_place_simple", "--workers", "1"]) == 0
    out, path = tmp_path / "pi0", tmp_path / "sft.json"
    assert main(["sft", "--demos", str(demos), "--out", str(out), "--epochs", "1", "--batch-size", "8",
                 "--seed", "0", "--threads", "1", "--json", str(path)]) == 0
    s = json.loads(path.read_text())
    assert s["steps"] >= 1 and s["loss_curve"] and s["examples"] > 0 and s["seconds"] > 0
    assert (out / "model.safetensors").exists()


def test_eval_with_a_broken_game_is_loud(generated_tasks, tmp_path, capsys):
    """A truncated game file fails its episode: eval shows an errors column and exits 2, unless
    --max-errors accepts it; the JSON is written either way."""
    import shutil
    from pathlib import Path

    from agentprm.envs.alfworld.engine import GAME_FILE
    from agentprm.envs.alfworld.tasks import load_tasks

    folder = tmp_path / "tasks"
    shutil.copytree(generated_tasks.eval, folder)
    broken = load_tasks(folder)[2]
    game = Path(broken.game) / GAME_FILE
    game.write_text(game.read_text()[:100])
    path = tmp_path / "eval.json"
    argv = ["eval", "--policy", "expert", "--tasks", str(folder), "--workers", "1", "--json", str(path)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()[-1]
    assert err.startswith(f"agentprm eval: error: 1 of {generated_tasks.num} episodes hit an env error")
    assert broken.task_id in err and "--max-errors 1" in err
    assert "errors" in captured.out
    s = json.loads(path.read_text())
    assert s["errors"] == 1 and s["by_type"][broken.task_type]["errors"] == 1
    assert main(argv + ["--max-errors", "1"]) == 0


@pytest.mark.parametrize("command", ["demos", "rollout"])
def test_demos_and_rollout_follow_evals_rule_for_broken_games(generated_tasks, tmp_path, capsys, command):
    """`demos` and `rollout` exited 0 on a broken game (an error column only) while `eval` failed: one rule
    for all, and what was played is written either way."""
    import shutil
    from pathlib import Path

    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.envs.alfworld.engine import GAME_FILE
    from agentprm.envs.alfworld.tasks import load_tasks

    folder = tmp_path / "tasks"
    shutil.copytree(generated_tasks.eval, folder)
    broken = load_tasks(folder)[2]
    game = Path(broken.game) / GAME_FILE
    game.write_text(game.read_text()[:100])
    out = tmp_path / ("demos.parquet" if command == "demos" else "rollouts")
    argv = [command, "--tasks", str(folder), "--workers", "1", "--out", str(out)]
    argv += ["--max-steps", "5"] if command == "demos" else ["--policy", "random", "--max-steps", "3", "--per-task", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"agentprm {command}: error: 1 of {generated_tasks.num} episodes hit an env error")
    assert broken.task_id in err and "--max-errors 1" in err
    episodes = list(iter_episodes(read_trajectories(out)))
    assert len(episodes) == generated_tasks.num and [e.task_id for e in episodes if e.error] == [broken.task_id]
    if command == "demos":   # its own file: replaced; a rollout folder would need --resume
        assert main(argv + ["--max-errors", "1"]) == 0


def test_output_paths_that_cannot_work_are_refused_before_work(generated_tasks, tmp_path, capsys):
    """`--json` naming a folder failed after the whole eval; `rollout --out` an existing file was a
    traceback; a user's folder got shards mixed into it."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    a_file = tmp_path / "a.txt"
    a_file.write_text("keep")
    cases = [(["eval", "--policy", "random", "--tasks", str(generated_tasks.eval), "--json", str(mine)], "is a folder"),
             (["rollout", "--policy", "random", "--tasks", str(generated_tasks.eval), "--out", str(a_file)],
              "not a folder"),
             (["rollout", "--policy", "random", "--tasks", str(generated_tasks.eval), "--out", str(mine)],
              "agentprm did not create")]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and a_file.read_text() == "keep"


def as_gpt2(cfg: dict) -> dict:
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": cfg["hidden_size"],
            "n_layer": cfg["num_hidden_layers"], "n_head": cfg["num_attention_heads"], "vocab_size": cfg["vocab_size"],
            "n_positions": 512}


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "config.json").write_text("{bad"), "config.json: not valid JSON"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000]),
     "cannot load the model (SafetensorError"),
    (lambda d: ((d / "model.safetensors").unlink(), (d / "pytorch_model.bin").write_bytes(b"x")),
     "pytorch_model.bin is a pickle"),
    (lambda d: (d / "tokenizer.json").write_text("{not json"), "cannot load the tokenizer"),
    # a config.json naming another architecture of the same sizes loaded with every weight freshly random
    (lambda d: (d / "config.json").write_text(json.dumps(as_gpt2(json.loads((d / "config.json").read_text())))),
     "weights do not fit config.json"),
])
def test_a_broken_model_folder_is_a_one_line_error(policy_dir, generated_tasks, tmp_path, capsys, damage, message):
    """a bad config.json, truncated weights or a pickled checkpoint were tracebacks (the pickle is never
    loaded)."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(policy_dir, folder)
    damage(folder)
    assert main(["eval", "--policy", str(folder), "--tasks", str(generated_tasks.eval), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err and str(folder) in err
    if "weights" in message or "model" in message:   # served elsewhere, the weights are the server's business
        return
    # served elsewhere (--backend openai), the folder's tokenizer is still read here, and a broken one said so
    assert main(["eval", "--policy", str(folder), "--tasks", str(generated_tasks.eval), "--workers", "1",
                 "--backend", "openai"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(folder) in err


@pytest.mark.parametrize("command", ["eval", "rollout"])
def test_a_prm_folder_given_as_the_policy_is_refused(command, policy_dir, generated_tasks, tmp_path, capsys):
    """`eval --policy <a PRM folder>` played it as a policy (its backbone loads as a causal LM) without a
    word. (The other way round, a policy given as a PRM, prm/model.py refuses: "not a PRM folder".)"""
    import shutil

    folder = tmp_path / "prm"
    shutil.copytree(policy_dir, folder)
    PromptConfig().save(folder, kind="prm", loss="soft-bce")
    out = tmp_path / "out"
    argv = [command, "--policy", str(folder), "--tasks", str(generated_tasks.eval), "--workers", "1"]
    assert main(argv + (["--out", str(out)] if command == "rollout" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"agentprm {command}: error: {folder}: a prm folder (agentprm.json kind 'prm'), not a policy (a PRM "
                   "is given with --prm)")
    assert not out.exists()


def test_a_hub_id_is_read_from_the_local_cache_and_otherwise_named_in_one_line(policy_dir, generated_tasks, tmp_path,
                                                                               capsys, monkeypatch):
    """`--policy Qwen/Qwen2.5-0.5B-Instruct` said "no such model folder" even with the model in the local
    Hugging Face cache. Now the cache's snapshot is used (never the network), and a missing one gets a hint."""
    import shutil

    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--agentprm-test--tiny-policy"
    shutil.copytree(policy_dir, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    out = tmp_path / "eval.json"
    assert main(["eval", "--policy", "agentprm-test/tiny-policy", "--tasks", str(generated_tasks.eval), "--workers",
                 "1", "--max-steps", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["episodes"] == generated_tasks.num
    capsys.readouterr()
    assert main(["eval", "--policy", "agentprm-test/not-cached", "--tasks", str(generated_tasks.eval)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("agentprm eval: error: agentprm-test/not-cached: no such model folder "
                                              f"(nor a model in the local Hugging Face cache {cache}")


def test_odd_path_characters_and_a_full_disk(generated_tasks, tmp_path, capsys, monkeypatch):
    """a '[/]' in a path crashed the results table (rich read it as markup); a full disk was a traceback."""
    import errno
    import shutil

    odd = tmp_path / "odd[/]" / "tasks[bold]"
    shutil.copytree(generated_tasks.eval, odd)
    assert main(["eval", "--policy", "random", "--tasks", str(odd), "--max-steps", "2", "--workers", "1"]) == 0
    assert main(["tasks", "list", "--tasks", str(odd)]) == 0
    out = capsys.readouterr().out
    flat = "".join(out.split())   # titles wrap at the terminal's width
    assert f"randomon{odd}" in flat and f"{odd}:{generated_tasks.num}games" in flat

    def full(path, *_):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("agentprm.commands.common.write_json", full)
    summary = tmp_path / "s.json"
    assert main(["eval", "--policy", "random", "--tasks", str(odd), "--max-steps", "2", "--workers", "1",
                 "--json", str(summary)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"agentprm eval: error: [Errno 28] No space left on device: '{summary}'" and not summary.exists()
