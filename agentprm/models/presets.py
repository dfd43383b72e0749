"""Model presets (small Llama configs trained from scratch) and loaders for any local Hugging Face causal LM.

    tok = build_tokenizer()
    model = build_model("tiny", tok, seed=0)      # LlamaForCausalLM, tied embeddings
    model.save_pretrained(d); tok.save_pretrained(d)
    model, tok = load_causal_lm(d), load_tokenizer(d)   # any HF causal LM folder (Qwen, Llama, ...) works too

Sizes with the 355-token env vocabulary: tiny 0.52 M parameters, small 4.29 M. RoPE has no position
parameters, so max_position_embeddings (1024, above the ~600 tokens of our longest measured prompts) costs nothing.
"""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants as hf_constants
from huggingface_hub import snapshot_download
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedModel,
                          PreTrainedTokenizerBase)

from agentprm.errors import UserError
from agentprm.models.device import place
from agentprm.models.packaged import packaged_model_dir
from agentprm.registry import Registry

MAX_POSITIONS = 1024
ADAPTER_CONFIG = "adapter_config.json"   # a LoRA adapter folder (models/lora.py)
PRESETS: Registry[Callable[[], dict[str, Any]]] = Registry("model preset")


def register_preset(name: str):
    """Register a function returning LlamaConfig keyword arguments (vocabulary and special ids come from the
    tokenizer at build time)."""
    def add(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        PRESETS.add(name, fn)
        return fn
    return add


@register_preset("tiny")
def tiny() -> dict[str, Any]:
    return dict(hidden_size=128, intermediate_size=448, num_hidden_layers=2, num_attention_heads=4)


@register_preset("small")
def small() -> dict[str, Any]:
    return dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4)


def preset_config(preset: str, tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    params = PRESETS.entry(preset)
    return LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, **params())


def build_model(preset: str, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> LlamaForCausalLM:
    """A freshly initialised model; the same (preset, tokenizer, seed) gives the same weights. The global torch
    RNG is left as it was."""
    config = preset_config(preset, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return place(LlamaForCausalLM(config))


def _hub_id(name: str) -> bool:
    """"org/name" whose "org" is no folder here: a Hub id rather than a mistyped relative path ("runs/sft")."""
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", name)) and not Path(name.split("/")[0]).exists()


def hub_snapshot(name: str) -> Path | None:
    """The local Hugging Face cache's snapshot of the Hub id `name` ("Qwen/Qwen2.5-0.5B-Instruct"), if it holds one;
    None otherwise. The cache only: agentprm never downloads."""
    if not _hub_id(name):
        return None
    try:
        return Path(snapshot_download(name, local_files_only=True))
    except Exception:   # LocalEntryNotFoundError, or a malformed id or cache: not there
        return None


def resolve_model(name: str | Path) -> Path:
    """Where a model given by name or path lives: the folder itself; else a packaged pretrained model's converted
    folder (models/packaged.py: "smollm2-135m"), or a Hub id's snapshot in the local cache; else the path as given
    (for the caller's "no such folder" error)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    return packaged_model_dir(str(name)) or hub_snapshot(str(name)) or path


def _model_dir(path: str | Path, needs: str, what: str) -> Path:
    given, path = str(path), resolve_model(path)
    if not path.is_dir():
        hint = (f" (nor a model in the local Hugging Face cache {hf_constants.HF_HUB_CACHE}: agentprm reads Hub ids "
                f"from the cache only — fetch it where there is network, e.g. `hf download {given}`, then copy the "
                "cache or give the folder)") if _hub_id(given) else ""
        raise UserError(f"{path}: no such {what} folder{hint}")
    if not (path / needs).exists():
        raise UserError(f"{path}: not a {what} folder (no {needs})")
    return path


def load_causal_lm(path: str | Path, *, trust_remote_code: bool = False, **kwargs: Any) -> PreTrainedModel:
    """Any Hugging Face causal LM saved in a local folder, or a LoRA adapter folder (its base with the adapter
    merged: models/lora.py); never reaches the network. `kwargs` go to `from_pretrained` (e.g. dtype)."""
    path = Path(path).expanduser()
    if not (path / ADAPTER_CONFIG).is_file():
        path = _model_dir(path, "config.json", "model")
    return place(load_weights(AutoModelForCausalLM, path, trust_remote_code=trust_remote_code, **kwargs))


def load_weights(auto_class, path: Path, **kwargs: Any) -> PreTrainedModel:
    """`auto_class.from_pretrained` of a local folder, safetensors only (a pickled pytorch_model.bin is refused, not
    unpickled); a bad config.json, corrupt or truncated weights, or weights that do not fit the config are a one-line
    error naming the folder. A LoRA adapter folder loads its base this way and merges the adapter in."""
    if (path / ADAPTER_CONFIG).is_file():
        from agentprm.models.lora import load_merged

        return load_merged(path, lambda base: load_weights(auto_class, base, **kwargs))
    try:
        json.loads((path / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}/config.json: not valid JSON ({e})") from None
    if not any(path.glob("*.safetensors")):
        pickled = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
        raise UserError(f"{path}: no .safetensors weights" + (f" ({pickled[0]} is a pickle: agentprm does not unpickle "
                        "model files; convert it to safetensors)" if pickled else ""))
    try:
        model, info = auto_class.from_pretrained(path, local_files_only=True, use_safetensors=True,
                                                 output_loading_info=True, **kwargs)
    except Exception as e:   # transformers raises OSError/ValueError/RuntimeError, safetensors its own kind
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"{path}: cannot load the model ({type(e).__name__}: {first[:300]})") from None
    # a head a task class adds (a PRM's score layer) may be new; the body must come from the weights — a config.json
    # naming another architecture of the same sizes would otherwise load as a randomly initialised model
    body = [k for k in info["missing_keys"] if k.startswith(f"{model.base_model_prefix}.")]
    if body:
        raise UserError(f"{path}: the weights do not fit config.json (model_type {model.config.model_type!r}): "
                        f"{len(body)} of its body's tensors are not in the safetensors files, e.g. {sorted(body)[0]}")
    name_base(model, path)
    return model


def name_base(model: PreTrainedModel, folder: Path) -> None:
    """Record `folder` (absolute) as where `model` came from: what peft writes as the base_model_name_or_path of a
    LoRA adapter trained on it (models/lora.py)."""
    model.name_or_path = model.config._name_or_path = str(folder.resolve())


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """A local tokenizer folder, made usable by agentprm (`prepare_tokenizer`)."""
    path = _model_dir(path, "tokenizer_config.json", "tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception as e:   # a broken config.json or tokenizer file: transformers' OSError/ValueError/JSON errors
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"{path}: cannot load the tokenizer ({type(e).__name__}: {first[:300]})") from None
    return prepare_tokenizer(tokenizer, path)


# A template for tokenizers that have none (base checkpoints): plain-text role markers, each assistant turn closed by
# the eos token, so that `prompt_ids + reply_ids` equals the rendered conversation (agent/encoding.py).
FALLBACK_CHAT_TEMPLATE = (
    "{{ bos_token or '' }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>\n{% generation %}{{ message['content'] }}{{ eos_token }}{% endgeneration %}\n"
    "{% else %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_PROBE = [{"role": "system", "content": "rules"}, {"role": "user", "content": "a room"}]   # the roles prompts use
NOTES: list[str] = []   # what prepare_tokenizer changed, once per folder: commands put them in their --json summary


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, source: str | Path) -> PreTrainedTokenizerBase:
    """What agentprm needs of a tokenizer, for any HF checkpoint: an eos token (else a one-line error naming the
    folder), a pad token (missing: pad = eos) and a chat template (missing: FALLBACK_CHAT_TEMPLATE). Each change is
    said once per folder on stderr and kept in NOTES; saving the tokenizer afterwards keeps it."""
    if tokenizer.eos_token is None:
        raise UserError(f"{source}: the tokenizer has no eos token (set 'eos_token' in tokenizer_config.json)")
    changes = []
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        changes.append(f"no pad token: using the eos token {tokenizer.eos_token!r} as pad")
    if not tokenizer.chat_template:
        tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
        changes.append("no chat template: using agentprm's plain-text one (models/presets.py FALLBACK_CHAT_TEMPLATE)")
    try:   # the template is the folder's code-like data: a sandbox refusal or a bad loop is its error, said up front
        tokenizer.apply_chat_template(_PROBE, add_generation_prompt=True, tokenize=False)
        tokenizer.apply_chat_template(_PROBE + [{"role": "assistant", "content": "look"}], tokenize=False)
    except Exception as e:   # jinja2's TemplateError/SecurityError, the sandbox's OverflowError, a raise_exception
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise UserError(f"{source}: the tokenizer's chat template cannot render a conversation "
                        f"({type(e).__name__}: {first})") from None
    for change in changes:
        note = f"{source}: tokenizer has {change}"
        if note not in NOTES:
            NOTES.append(note)
            print(f"agentprm: warning: {note}", file=sys.stderr)
    return tokenizer
