"""LoRA through peft: adapters for SFT, the PRM and the policy update, saved in peft's own layout and
loadable with `PeftModel.from_pretrained` as well as by every agentprm stage; merged on request; an adapter whose
base is itself an adapter loads as the chain; the update's reference is π_{i-1} exactly."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from agentprm.cli import main


def run(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def data(tmp_path_factory, generated_tasks, tiny_policy) -> dict[str, Path]:
    """Demos, a few rollouts of the tiny policy, their MC targets and a PRM trained in full."""
    root = tmp_path_factory.mktemp("lora")
    d = {name: root / name for name in ("demos.parquet", "roll", "q.parquet", "prm")}
    assert run("demos", "--tasks", generated_tasks.train, "--out", d["demos.parquet"], "--workers", 1) == 0
    assert run("rollout", "--policy", tiny_policy, "--tasks", generated_tasks.train, "--per-task", 2,
               "--temperature", 1.0, "--max-steps", 4, "--workers", 1, "--out", d["roll"]) == 0
    assert run("targets", "mc", "--rollouts", d["roll"], "--out", d["q.parquet"]) == 0
    assert run("train-prm", "--targets", d["q.parquet"], "--init", tiny_policy, "--out", d["prm"], "--epochs", 1,
               "--batch-size", 8) == 0
    return d


def ids(n: int = 40) -> torch.Tensor:
    return torch.arange(5, 5 + n)[None] % 300


def causal_logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids()).logits


def test_adapters_start_at_zero_so_the_wrapped_model_is_the_base_exactly(tiny_policy):
    """Why the online-DPO / kl-distill reference (a copy taken before the first step) stays π_{i-1} under LoRA."""
    from agentprm.models import load_causal_lm
    from agentprm.models.lora import add_lora, trainable
    from agentprm.train.config import LoraConfig

    base = causal_logits(load_causal_lm(tiny_policy))
    wrapped = add_lora(load_causal_lm(tiny_policy), LoraConfig(r=4)).eval()
    assert torch.equal(causal_logits(wrapped), base)
    counts = trainable(wrapped)
    assert 0 < counts["trainable_params"] < 0.2 * counts["total_params"]
    names = {n.split(".")[-3] for n, p in wrapped.named_parameters() if p.requires_grad}   # …q_proj.lora_A.default.weight
    assert names == {"lora_A", "lora_B"}          # every base weight, embeddings and head included, is frozen


@pytest.mark.slow   # ~40 s with its fixture: CI runs it; the other LoRA tests stay in `make test`
def test_sft_with_lora_writes_a_peft_adapter_that_peft_and_agentprm_load_alike(data, tiny_policy, tmp_path,
                                                                               generated_tasks):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from agentprm.agent.lm import LMAgent
    from agentprm.models import load_causal_lm

    out, merged = tmp_path / "pi-lora", tmp_path / "pi-merged"
    flags = ("--demos", data["demos.parquet"], "--model", tiny_policy, "--epochs", 1, "--batch-size", 8, "--lr", 1e-2,
             "--lora-r", 4)
    assert run("sft", *flags, "--out", out, "--json", tmp_path / "sft.json") == 0
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not (out / "model.safetensors").exists()                        # the adapter only, not a model copy
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(tiny_policy.resolve()) and adapter["r"] == 4
    lora = json.loads((tmp_path / "sft.json").read_text())["lora"]
    assert 0 < lora["trainable_fraction"] < 0.2
    # its model card names the base portably (peft's template wrote the absolute path of this machine)
    card = (out / "README.md").read_text()
    relative = os.path.relpath(tiny_policy.resolve(), out.resolve())
    assert str(tiny_policy.resolve()) not in card and f"LoRA adapters (peft) on `{relative}`" in card
    assert card.startswith("---\nlibrary_name: peft\ntags: [agentprm, policy]\n---\n")

    ours = causal_logits(load_causal_lm(out))
    theirs = causal_logits(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_policy), out).eval())
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert not torch.allclose(ours, causal_logits(load_causal_lm(tiny_policy)), atol=1e-3)   # it learnt something
    assert LMAgent.load(out).act  # every stage loads it as a plain policy
    assert run("eval", "--policy", out, "--tasks", generated_tasks.eval, "--max-steps", 2, "--workers", 1) == 0

    assert run("sft", *flags, "--lora-merge", "--out", merged) == 0      # same seed, same training, merged on save
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    assert f"full weights, trained from `{os.path.relpath(tiny_policy.resolve(), merged.resolve())}`" in \
        (merged / "README.md").read_text()
    assert torch.allclose(causal_logits(load_causal_lm(merged)), ours, atol=1e-5)


def test_lora_on_a_preset_trained_from_scratch_is_refused_before_work(data, tmp_path, capsys):
    assert run("sft", "--demos", data["demos.parquet"], "--model", "tiny", "--lora-r", 4,
               "--out", tmp_path / "x") == 2
    assert "nothing to adapt" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert run("sft", "--demos", data["demos.parquet"], "--model", "tiny", "--lora-r", 4, "--lora-dropout", 1.5,
               "--out", tmp_path / "x") == 2
    assert "--lora-dropout must be in [0, 1), got 1.5" in capsys.readouterr().err


def test_prm_with_lora_saves_adapter_and_head_and_loads_from_them(data, tiny_policy, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from agentprm.agent.encoding import prompt_ids, reply_ids
    from agentprm.data.tables import read_targets
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.targets.mc import load_states

    out = tmp_path / "prm-lora"
    assert run("train-prm", "--targets", data["q.parquet"], "--init", tiny_policy, "--out", out, "--epochs", 2,
               "--batch-size", 8, "--lr", 1e-2, "--lora-r", 4, "--json", tmp_path / "prm.json") == 0
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    assert json.loads((out / "agentprm.json").read_text())["kind"] == "prm"
    assert json.loads((tmp_path / "prm.json").read_text())["lora"]["trainable_fraction"] < 0.2

    prm = ProcessRewardModel.load(out)
    targets = read_targets(data["q.parquet"])
    state, action = load_states(targets)[0], targets.table["action"][0].as_py()
    seq = prompt_ids(prm.tokenizer, state, prm.prompt) + reply_ids(prm.tokenizer, action)
    base = AutoModelForSequenceClassification.from_pretrained(tiny_policy, num_labels=1)
    theirs = PeftModel.from_pretrained(base, out).eval()
    with torch.no_grad():
        expected = theirs(input_ids=torch.tensor([seq])).logits[0, 0]
    assert torch.allclose(prm.logits_of([seq])[0], expected, atol=1e-5)   # the trained head came with the adapter
    fresh = ProcessRewardModel.init(tiny_policy, seed=0)
    assert not torch.allclose(prm.logits_of([seq]), fresh.logits_of([seq]), atol=1e-3)


def test_policy_update_with_lora_chains_adapters_on_adapters(data, tiny_policy, tmp_path):
    from peft import PeftModel

    from agentprm.models import load_causal_lm

    pi1, pi2 = tmp_path / "pi1", tmp_path / "pi2"
    common = ("--prm", data["prm"], "--rollouts", data["roll"], "--steps", 3, "--batch-size", 2, "--lr", 1e-2,
              "--lora-r", 4, "--method", "kl-distill")
    assert run("train-policy", "--policy", tiny_policy, "--out", pi1, *common, "--json", tmp_path / "u.json") == 0
    assert json.loads((pi1 / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_policy.resolve())
    assert json.loads((tmp_path / "u.json").read_text())["lora"]["trainable_fraction"] < 0.2
    assert run("train-policy", "--policy", pi1, "--out", pi2, *common) == 0      # π2's base is the adapter π1
    assert json.loads((pi2 / "adapter_config.json").read_text())["base_model_name_or_path"] == str(pi1.resolve())
    chained = causal_logits(load_causal_lm(pi2))
    assert torch.allclose(chained, causal_logits(PeftModel.from_pretrained(load_causal_lm(pi1), pi2).eval()),
                          atol=1e-5)
    assert not torch.allclose(chained, causal_logits(load_causal_lm(pi1)), atol=1e-4)


def test_a_pickled_or_orphaned_adapter_is_a_one_line_error(tmp_path, tiny_policy):
    from agentprm.errors import UserError
    from agentprm.models import load_causal_lm

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tiny_policy)}))
    (folder / "adapter_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(UserError, match="adapter_model.bin is a pickle"):
        load_causal_lm(folder)
    (folder / "adapter_model.bin").unlink()
    (folder / "adapter_model.safetensors").write_bytes(b"")
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(UserError, match="is not a folder here"):
        load_causal_lm(folder)


def test_an_adapter_chain_that_loops_is_a_one_line_error(tmp_path, capsys):
    """an adapter whose base chain came back to itself was a RecursionError traceback."""
    import json as _json

    from agentprm.cli import main

    a, b = tmp_path / "a", tmp_path / "b"
    for folder, base in ((a, b), (b, a)):
        folder.mkdir()
        (folder / "adapter_config.json").write_text(_json.dumps({"peft_type": "LORA", "base_model_name_or_path":
                                                                 str(base), "r": 4, "task_type": "CAUSAL_LM"}))
        (folder / "adapter_model.safetensors").write_bytes(b"")
    assert main(["eval", "--policy", str(a), "--tasks", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "form a loop" in err and str(b) in err


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_all_linear_lora_on_gpt2_llama_and_qwen2_saves_and_loads_back(arch, tmp_path):
    """"all-linear" on GPT-2 collected only nn.Linear — GPT-2's layers are transformers' Conv1D — and peft
    failed with NoMatchingPeftModuleError. On each architecture (random weights, built from a config here) the
    adapters cover every attention and MLP layer, start as the base exactly, and a trained adapter saved and merged
    back gives the adapted model's logits."""
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config

    from agentprm.models.lora import add_lora, linear_layers, load_merged, save_trained
    from agentprm.train.config import LoraConfig

    small = dict(num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=320)
    config, expected = {
        "gpt2": (GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=320, n_positions=64, bos_token_id=0,
                            eos_token_id=0), ["c_attn", "c_fc", "c_proj"]),
        "llama": (LlamaConfig(**small), ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]),
        "qwen2": (Qwen2Config(**small), ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]),
    }[arch]
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "base")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    assert linear_layers(base) == expected
    before = causal_logits(base)
    model = add_lora(base, LoraConfig(r=4), seed=0).eval()   # (no LoRA dropout while comparing)
    adapted = {name.split(".lora_A")[0].rsplit(".", 1)[-1] for name, _ in model.named_parameters() if ".lora_A" in name}
    assert adapted == set(expected)
    assert torch.equal(causal_logits(model), before)          # B = 0: the wrapped model is the base
    with torch.no_grad():                                       # as if trained: every B moves
        for name, p in model.named_parameters():
            if ".lora_B" in name:
                p.add_(0.05)
    trained = causal_logits(model)
    assert not torch.allclose(trained, before)
    save_trained(model, tmp_path / "adapter")
    merged = load_merged(tmp_path / "adapter", AutoModelForCausalLM.from_pretrained)
    torch.testing.assert_close(causal_logits(merged), trained, atol=1e-5, rtol=1e-4)
