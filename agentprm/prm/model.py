"""`ProcessRewardModel`: Q_φ(s, a) = σ(head(LM_φ(prompt(s) ⊕ a))), a scalar head on the reply's last token.

    prm = ProcessRewardModel.init("runs/sft", seed=0)   # any local HF causal-LM folder, or a preset ("tiny")
    q = prm.score(states, replies)                        # tensor (N,) of Q in [0, 1], one batched call
    prm.save("runs/prm"); prm = ProcessRewardModel.load("runs/prm")

Architecture: the policy's backbone as `AutoModelForSequenceClassification(num_labels=1)` (for Llama/Qwen/Mistral
folders the backbone weights load and only the 1×hidden `score` head is new), so a saved PRM is a plain HF folder
(safetensors) that `AutoModelForSequenceClassification.from_pretrained` reads. We pool ourselves, at the last
position of the attention mask, instead of HF's "rightmost token that is not pad": checkpoints whose pad token is
the EOS token would otherwise pool one token early, since every reply ends with EOS. Sequences are
`encoding.prompt_ids(state) + encoding.reply_ids(reply)`, right-padded: the PRM sees exactly the ids the policy
scored. `agentprm.json` holds the PromptConfig (inherited from the init folder) and "kind": "prm".
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, LlamaForSequenceClassification, PreTrainedModel
from transformers.utils import logging as hf_logging

from agentprm.agent.encoding import CONFIG_FILE, PromptConfig, prompt_ids, read_json_object, reply_ids
from agentprm.agent.scoring import right_pad
from agentprm.agent.state import AgentState
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.errors import UserError
from agentprm.outputs import atomic_dir
from agentprm.models.device import place
from agentprm.models.presets import ADAPTER_CONFIG, PRESETS, load_tokenizer, load_weights, preset_config
from agentprm.train.distributed import is_main

KIND = "prm"


class ProcessRewardModel(nn.Module):
    def __init__(self, lm: PreTrainedModel, tokenizer, prompt: PromptConfig):
        super().__init__()
        if not hasattr(lm, "score"):
            raise UserError(f"{type(lm).__name__}: no scalar 'score' head (not a decoder sequence classifier)")
        self.lm, self.tokenizer, self.prompt = lm, tokenizer, prompt

    @classmethod
    def init(cls, source: str | Path, seed: int = 0) -> ProcessRewardModel:
        """A PRM from a causal-LM folder (backbone, tokenizer and PromptConfig kept; new head) or a preset name
        (fresh weights, env tokenizer, default prompt). `seed` fixes the new weights; the global RNG is untouched."""
        folder = Path(source).expanduser()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if folder.is_dir():
                tokenizer = load_tokenizer(folder)
                _ensure_pad(tokenizer)
                with _quiet_transformers():  # its load report lists the new head as "MISSING": expected here
                    lm = _load_classifier(folder, pad_token_id=tokenizer.pad_token_id)
                return cls(lm, tokenizer, PromptConfig.load(folder))
            if str(source) in PRESETS:
                tokenizer = build_tokenizer()
                config = preset_config(str(source), tokenizer)
                config.num_labels = 1
                return cls(place(LlamaForSequenceClassification(config)), tokenizer, PromptConfig())
        raise UserError(f"--init {source}: neither a model folder nor a preset (presets: {', '.join(PRESETS)})")

    @classmethod
    def load(cls, folder: str | Path) -> ProcessRewardModel:
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise UserError(f"{folder}: no such PRM folder")
        meta = folder / CONFIG_FILE
        kind = read_json_object(meta).get("kind") if meta.is_file() else None
        if kind != KIND:
            raise UserError(f"{folder}: not a PRM folder ({CONFIG_FILE} kind is {kind!r}, expected {KIND!r})")
        tokenizer = load_tokenizer(folder)
        return cls(_load_classifier(folder, pad_token_id=tokenizer.pad_token_id), tokenizer, PromptConfig.load(folder))

    def add_lora(self, cfg, seed: int = 0) -> None:
        """Train LoRA adapters on the backbone (models/lora.py) and the new scalar head in full, instead of every
        weight; `save` then writes peft's adapter folder (head included), or merged weights with `merge`."""
        from agentprm.models.lora import add_lora

        self.lm = add_lora(self.lm, cfg, head="score", seed=seed)

    def save(self, folder: str | Path, merge: bool = False, **info: Any) -> Path:
        """Atomically: written to a temp folder next to `folder`, then renamed over it. A model with LoRA adapters
        is saved as its adapter folder, or with `merge` as full weights. Under a data-parallel launch only the main
        process writes (train/distributed.py)."""
        from agentprm.models.lora import save_trained

        if not is_main():
            return Path(folder)

        with atomic_dir(folder) as tmp:
            save_trained(self.lm, tmp, merge, what="PRM")
            self.tokenizer.save_pretrained(tmp)
            self.prompt.save(tmp, kind=KIND, **info)
        return Path(folder)

    def encode(self, state: AgentState, reply: str) -> list[int]:
        return prompt_ids(self.tokenizer, state, self.prompt) + reply_ids(self.tokenizer, reply)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits f(s, a), shape (batch,), for right-padded sequences."""
        lm = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm   # under LoRA: peft's wrap
        hidden = lm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        last = attention_mask.sum(-1) - 1
        return lm.score(hidden[torch.arange(len(last), device=hidden.device), last]).squeeze(-1).float()

    def logits_of(self, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        device = next(self.parameters()).device
        ids, mask = right_pad(seqs, self.tokenizer.pad_token_id)
        return self(ids.to(device), mask.to(device))

    @torch.no_grad()
    def score_ids(self, seqs: Sequence[Sequence[int]], batch_size: int = 32) -> torch.Tensor:
        """Q in [0, 1] for encoded sequences, in batches of `batch_size`."""
        was_training = self.training
        self.eval()
        out = [torch.sigmoid(self.logits_of(seqs[i:i + batch_size])).cpu() for i in range(0, len(seqs), batch_size)]
        self.train(was_training)
        return torch.cat(out) if out else torch.empty(0)

    def score(self, states: Sequence[AgentState], replies: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Q_φ(s, a) in [0, 1] for every (state, reply); states shared by several replies are encoded once."""
        if len(states) != len(replies):
            raise ValueError(f"{len(states)} states but {len(replies)} replies")
        prompts: dict[str, list[int]] = {}
        seqs = []
        for state, reply in zip(states, replies):
            if state.key() not in prompts:
                prompts[state.key()] = prompt_ids(self.tokenizer, state, self.prompt)
            seqs.append(prompts[state.key()] + reply_ids(self.tokenizer, reply))
        return self.score_ids(seqs, batch_size)


def _ensure_pad(tokenizer) -> None:
    if tokenizer.pad_token is None:  # many causal-LM checkpoints ship none; pooling uses the mask, so EOS is safe
        tokenizer.pad_token = tokenizer.eos_token


def _load_classifier(folder: Path, pad_token_id: int | None) -> PreTrainedModel:
    """The folder's backbone as a scalar classifier; a LoRA adapter folder (a PRM saved with its adapter, or a
    policy adapter to initialise from) loads its base and merges the adapter in (models/lora.py)."""
    adapter = (folder / ADAPTER_CONFIG).exists()
    if not adapter and not (folder / "config.json").exists():
        raise UserError(f"{folder}: not a model folder (no config.json)")
    with _quiet_transformers() if adapter else nullcontext():   # an adapter's base lists the head as "MISSING"
        lm = load_weights(AutoModelForSequenceClassification, folder, num_labels=1)
    lm.config.pad_token_id = pad_token_id
    return place(lm)


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
