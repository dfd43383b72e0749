"""Model presets and loaders: sizes, determinism, save/load through plain Hugging Face, one-line errors."""
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from agentprm.agent.tokenizer import build_tokenizer
from agentprm.errors import UserError
from agentprm.models import PRESETS, build_model, load_causal_lm, load_tokenizer, register_preset

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("preset, low, high", [("tiny", 0.35e6, 0.7e6), ("small", 3e6, 6e6)])
def test_preset_sizes(tok, preset, low, high):
    model = build_model(preset, tok, seed=0)
    assert isinstance(model, LlamaForCausalLM)
    assert low < n_params(model) < high
    assert model.config.tie_word_embeddings and model.config.vocab_size == len(tok)
    assert model.config.max_position_embeddings >= 1024
    assert (model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id) == (
        tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)


def test_same_seed_same_weights_and_global_rng_untouched(tok):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b, c = (build_model("tiny", tok, seed=s) for s in (0, 0, 1))
    assert torch.equal(torch.rand(3), expected)
    w = "model.embed_tokens.weight"
    assert torch.equal(a.state_dict()[w], b.state_dict()[w])
    assert not torch.equal(a.state_dict()[w], c.state_dict()[w])


def test_save_load_gives_identical_logits(tok, tmp_path):
    model = build_model("tiny", tok, seed=0).eval()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    ids = torch.tensor([tok("You arrive at drawer 1. The drawer 1 is closed.")["input_ids"]])
    with torch.no_grad():
        expected = model(ids).logits
        for loaded in (AutoModelForCausalLM.from_pretrained(tmp_path), load_causal_lm(tmp_path)):
            assert torch.equal(loaded.eval()(ids).logits, expected)
    assert load_tokenizer(tmp_path)("open drawer 1")["input_ids"] == tok("open drawer 1")["input_ids"]


def test_missing_or_empty_folder_gives_one_line_error(tmp_path):
    missing = tmp_path / "nope"
    for load in (load_causal_lm, load_tokenizer):
        with pytest.raises(UserError, match="no such") as e:
            load(missing)
        assert str(missing) in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(UserError, match="config.json|tokenizer_config.json") as e:
            load(tmp_path)
        assert str(tmp_path) in str(e.value)


def test_unknown_preset_names_the_known_ones(tok):
    with pytest.raises(UserError, match="tiny"):
        build_model("huge", tok)


def test_register_preset_adds_a_config(tok):
    @register_preset("test-one-layer")
    def one_layer():
        return dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2)

    try:
        assert build_model("test-one-layer", tok).config.num_hidden_layers == 1
        with pytest.raises(ValueError, match="'test-one-layer' is registered already"):
            register_preset("test-one-layer")(lambda: {})
        assert PRESETS["test-one-layer"] is one_layer
    finally:
        del PRESETS["test-one-layer"]
