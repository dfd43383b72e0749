"""Any Hugging Face causal LM folder works: tiny GPT-2- and Qwen2-architecture models with byte-level BPE
tokenizers trained here with `tokenizers` — the GPT-2 one without pad token or chat template (a base checkpoint),
the Qwen2 one with a ChatML template whose end-of-turn token (<|im_end|>) is not its eos (<|endoftext|>) — through
sft → eval (both modes) → rollout → targets → train-prm → train-policy → Best-of-N."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentprm.cli import main

CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _bpe(specials: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from agentprm.agent.tokenizer import env_text

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(env_text(), trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return core


def _save(folder: Path, model, tokenizer) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory) -> dict[str, Path]:
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    gpt2_tok = PreTrainedTokenizerFast(tokenizer_object=_bpe(["<|endoftext|>"]), eos_token="<|endoftext|>",
                                       bos_token="<|endoftext|>")
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(gpt2_tok), n_positions=4096, n_embd=32, n_layer=2, n_head=2,
                                      bos_token_id=gpt2_tok.eos_token_id, eos_token_id=gpt2_tok.eos_token_id))
    qwen_tok = PreTrainedTokenizerFast(tokenizer_object=_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
                                       eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                       additional_special_tokens=["<|im_start|>", "<|im_end|>"], chat_template=CHATML)
    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(qwen_tok), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                        max_position_embeddings=4096, eos_token_id=qwen_tok.eos_token_id,
                                        pad_token_id=qwen_tok.pad_token_id, tie_word_embeddings=True))
    return {"gpt2": _save(root / "gpt2-base", gpt2, gpt2_tok), "qwen2": _save(root / "qwen2-chat", qwen, qwen_tok)}


def test_a_base_tokenizer_gets_pad_and_template_once_and_said(hf_folders, capsys):
    from agentprm.agent.encoding import end_of_turn_id
    from agentprm.models import load_tokenizer

    tok = load_tokenizer(hf_folders["gpt2"])
    assert tok.pad_token == tok.eos_token == "<|endoftext|>" and "<|assistant|>" in tok.chat_template
    assert end_of_turn_id(tok) == tok.eos_token_id
    err = capsys.readouterr().err
    assert err.count("no pad token") == 1 and err.count("no chat template") == 1 and str(hf_folders["gpt2"]) in err
    load_tokenizer(hf_folders["gpt2"])
    assert capsys.readouterr().err == ""                                  # said once per folder
    qwen = load_tokenizer(hf_folders["qwen2"])
    assert end_of_turn_id(qwen) == qwen.convert_tokens_to_ids("<|im_end|>") != qwen.eos_token_id


def test_a_tokenizer_without_eos_is_a_one_line_error(hf_folders, tmp_path, capsys):
    import shutil

    folder = tmp_path / "no-eos"
    shutil.copytree(hf_folders["gpt2"], folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["eos_token"] = None
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert main(["eval", "--policy", str(folder), "--tasks", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no eos token" in err and str(folder) in err


@pytest.mark.slow   # minutes: run by `make test-all` and CI
@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_the_pipeline_runs_on_other_architectures(arch, hf_folders, generated_tasks, tmp_path):
    from agentprm.agent.encoding import end_of_turn_id, prompt_ids, reply_ids
    from agentprm.agent.format import state_to_messages
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.replay import episode_states
    from agentprm.data.trajectories import iter_episodes, read_trajectories

    run = lambda *argv: main([str(a) for a in argv])  # noqa: E731
    demos, pi0, pi1, roll, q, prm = (tmp_path / n for n in ("demos.parquet", "pi0", "pi1", "roll", "q.parquet",
                                                              "prm"))
    train, evals = generated_tasks.train, generated_tasks.eval
    assert run("demos", "--tasks", train, "--out", demos, "--workers", 1) == 0
    assert run("sft", "--demos", demos, "--model", hf_folders[arch], "--out", pi0, "--epochs", 1, "--batch-size", 8,
               "--lr", 1e-3, "--json", tmp_path / "sft.json") == 0
    notes = json.loads((tmp_path / "sft.json").read_text()).get("model_notes", [])
    assert (arch == "gpt2") == any("no pad token" in n and str(hf_folders[arch]) in n for n in notes)
    agent = LMAgent.load(pi0)                                             # the saved folder needs no more fixing
    assert agent.tokenizer.pad_token is not None and agent.tokenizer.chat_template
    ids = reply_ids(agent.tokenizer, "ACTION: look")
    assert ids[-1] == end_of_turn_id(agent.tokenizer)
    for mode in ("choose", "generate"):
        assert run("eval", "--policy", pi0, "--tasks", evals, "--mode", mode, "--max-steps", 2, "--workers", 1,
                   "--json", tmp_path / f"eval-{mode}.json") == 0
        assert json.loads((tmp_path / f"eval-{mode}.json").read_text())["errors"] == 0
    assert run("rollout", "--policy", pi0, "--tasks", train, "--per-task", 1, "--temperature", 1.0, "--max-steps", 3,
               "--workers", 1, "--out", roll) == 0
    episodes = list(iter_episodes(read_trajectories(roll)))
    assert len(episodes) == generated_tasks.num and all(len(e.steps) == 3 or e.steps[-1].done for e in episodes)
    assert run("targets", "mc", "--rollouts", roll, "--out", q) == 0
    assert run("train-prm", "--targets", q, "--init", pi0, "--out", prm, "--epochs", 1, "--batch-size", 8) == 0
    assert run("train-policy", "--policy", pi0, "--prm", prm, "--rollouts", roll, "--out", pi1, "--steps", 2,
               "--batch-size", 2) == 0
    assert run("eval", "--policy", pi1, "--prm", prm, "--best-of", 2, "--temperature", 0.7, "--tasks", evals,
               "--max-steps", 2, "--workers", 1) == 0
    state, reply = next(episode_states(episodes[0]))         # token-in-token-out: prompt + reply = the chat render
    full = agent.tokenizer.apply_chat_template(
        [*state_to_messages(state, show_admissible=agent.prompt_cfg.show_admissible,
                            history_turns=agent.prompt_cfg.history_turns), {"role": "assistant", "content": reply}],
        tokenize=True, return_dict=True)["input_ids"]
    ours = prompt_ids(agent.tokenizer, state, agent.prompt_cfg) + reply_ids(agent.tokenizer, reply)
    assert list(full[:len(ours)]) == ours


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_the_reason_commands_run_on_other_architectures(arch, hf_folders, tmp_path):
    """`agentprm reason` with a BPE model folder: SFT on worked solutions, eval, and a step of each RL method;
    the Qwen2 folder's end of turn (<|im_end|>) is not its eos."""
    train, test = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    assert main(["reason", "problems", "--split", "train", "--num", "20", "--out", str(train)]) == 0
    assert main(["reason", "problems", "--split", "eval", "--num", "4", "--out", str(test)]) == 0
    model = tmp_path / "reasoner"
    assert main(["reason", "sft", "--problems", str(train), "--out", str(model), "--model", str(hf_folders[arch]),
                 "--steps", "3", "--batch-size", "4", "--lr", "1e-4"]) == 0
    assert main(["reason", "eval", "--model", str(model), "--problems", str(test), "--max-new-tokens", "8",
                 "--json", str(tmp_path / "eval.json")]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["problems"] == 4
    for algo in ("grpo", "spro", "prime"):
        assert main(["reason", "rl", "--model", str(model), "--problems", str(train), "--algo", algo, "--steps", "1",
                     "--prompts", "2", "--group", "2", "--max-new-tokens", "6", "--out", str(tmp_path / algo)]) == 0


def test_reason_sft_trains_lora_adapters_on_a_model_folder(hf_folders, tmp_path):
    from agentprm.reason.model import load_reasoner

    train = tmp_path / "train.jsonl"
    assert main(["reason", "problems", "--split", "train", "--num", "10", "--out", str(train)]) == 0
    out = tmp_path / "adapter"
    assert main(["reason", "sft", "--problems", str(train), "--out", str(out), "--model", str(hf_folders["qwen2"]),
                 "--steps", "2", "--batch-size", "2", "--lora-r", "4"]) == 0
    assert (out / "adapter_config.json").is_file() and not (out / "model.safetensors").exists()
    model, _ = load_reasoner(out)          # the base with the adapter merged in
    assert sum(p.numel() for p in model.parameters()) > 0
    assert main(["reason", "sft", "--problems", str(train), "--out", str(tmp_path / "x"), "--lora-r", "4"]) == 2


def test_reason_rl_trains_lora_adapters_whose_reference_is_the_adapters_switched_off(hf_folders, tmp_path):
    """`reason rl --lora-r`: only the adapter is saved; π_ref is the policy with its adapters off (no second copy),
    so at the first step, adapters still at their zero init, the policy's KL to π_ref is exactly 0."""
    from agentprm.reason.model import load_reasoner

    train = tmp_path / "train.jsonl"
    assert main(["reason", "problems", "--split", "train", "--num", "10", "--out", str(train)]) == 0
    for algo in ("spro", "prime"):
        out, summary = tmp_path / algo, tmp_path / f"{algo}.json"
        assert main(["reason", "rl", "--model", str(hf_folders["qwen2"]), "--problems", str(train), "--algo", algo,
                     "--steps", "2", "--prompts", "2", "--group", "2", "--max-new-tokens", "6", "--lr", "1e-2",
                     "--lora-r", "4", "--out", str(out), "--json", str(summary)]) == 0
        assert (out / "adapter_config.json").is_file() and not (out / "model.safetensors").exists()
        log = json.loads(summary.read_text())["log"]
        assert [r["step"] for r in log] == [1, 2]
        assert log[0]["kl_ref"] == 0.0
        assert sum(p.numel() for p in load_reasoner(out)[0].parameters()) > 0
