"""LoRA adapters through peft: train a few low-rank matrices instead of every weight, save them in peft's own layout.

    model = add_lora(load_causal_lm("runs/pi0"), LoraConfig(r=8))      # base weights frozen
    ... train ...
    save_trained(model, "runs/pi1")        # adapter_config.json + adapter_model.safetensors, base = runs/pi0
    load_causal_lm("runs/pi1")             # base loaded, adapter merged: a plain model for every other stage
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("runs/pi0"), "runs/pi1")   # peft's own way

An adapter folder names its base (`base_model_name_or_path` in adapter_config.json, an absolute path), which may
itself be an adapter folder: π_i trained with LoRA on an adapter π_{i-1} loads as π_{i-1} (recursively) plus its
own adapter. With `merge` the folder holds the merged full weights instead, and nothing points back. A PRM's scalar
head is new, so it is trained in full and saved with the adapter (peft's modules_to_save). The reference of an
update stays π_{i-1} exactly: the adapters start at zero (B = 0), so the model before the first step is π_{i-1}.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, TaskType, get_peft_model
from transformers.pytorch_utils import Conv1D

from agentprm.errors import UserError
from agentprm.models.presets import ADAPTER_CONFIG, name_base
from agentprm.train.config import LoraConfig, check_lora

ADAPTER_WEIGHTS = "adapter_model.safetensors"
HEADS = ("lm_head", "score")   # output layers: never adapted (a classifier's head is trained in full instead)
LINEAR = (torch.nn.Linear, Conv1D)   # GPT-2's attention and MLP layers are transformers' Conv1D, a transposed Linear


def linear_layers(model: torch.nn.Module) -> list[str]:
    """The distinct names of the model's linear layers, the output heads excepted ("all-linear", as peft means it)."""
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, LINEAR) and name.rsplit(".", 1)[-1] not in HEADS})


def add_lora(model, cfg: LoraConfig, *, head: str | None = None, seed: int = 0) -> PeftModel:
    """`model` wrapped with LoRA adapters on `cfg.target_modules`, every other weight frozen; `head` (a classifier's
    new scalar head) is trained in full and saved with the adapter. The base is the folder `model` was loaded from;
    a model built from scratch has none (an adapter of random weights is refused). `seed` fixes the adapters' random
    half (A; B starts at zero); the global RNG is left as it was."""
    check_lora(cfg)
    base = getattr(model, "name_or_path", "")
    if not base or not Path(base).is_dir():
        raise UserError("lora: needs a model loaded from a folder to adapt (a preset trained from scratch has "
                        "nothing to adapt: train all of it with lora.r 0)")
    names = linear_layers(model) if cfg.target_modules == "all-linear" else cfg.module_names()
    missing = [n for n in names if not any(m.endswith(f".{n}") for m, _ in model.named_modules())]
    if missing:
        raise UserError(f"lora.target_modules: {type(model).__name__} has no module named {missing[0]!r} "
                        f"(its linear layers: {', '.join(linear_layers(model))})")
    conv1d = any(isinstance(m, Conv1D) and name.rsplit(".", 1)[-1] in names for name, m in model.named_modules())
    peft_cfg = PeftLoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=names,
                              fan_in_fan_out=conv1d, modules_to_save=[head] if head else None,
                              task_type=TaskType.SEQ_CLS if head else TaskType.CAUSAL_LM)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, peft_cfg)


def trainable(model: torch.nn.Module) -> dict:
    """Trainable and total parameter counts: what LoRA saves in gradients and optimiser state."""
    total = sum(p.numel() for p in model.parameters())
    train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_params": train, "total_params": total, "trainable_fraction": round(train / max(1, total), 6)}


def save_trained(model, folder: str | Path, merge: bool = False) -> None:
    """Write a trained model's weights into `folder`: a peft model's adapter (peft's layout), or with `merge` its
    merged full weights (the adapters are folded into the model, which stays usable); any other model in full."""
    if isinstance(model, PeftModel):
        if merge:
            model.merge_and_unload().save_pretrained(folder)
        else:
            model.save_pretrained(folder)
    else:
        model.save_pretrained(folder)


def adapter_base(folder: Path) -> Path:
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise UserError(f"{folder}/{ADAPTER_CONFIG}: not a JSON object ({e})") from None
    if not base:
        raise UserError(f"{folder}/{ADAPTER_CONFIG}: no 'base_model_name_or_path' (the model the adapter adapts)")
    path = Path(base) if Path(base).is_absolute() else folder / base
    if not path.is_dir():
        raise UserError(f"{folder}: the adapter's base {path} is not a folder here (moved or deleted?)")
    return path


def load_merged(folder: Path, load_base: Callable[[Path], torch.nn.Module]) -> torch.nn.Module:
    """An adapter folder as a plain model: `load_base(base folder)` (a full or an adapter folder), then the adapter
    applied and merged. Safetensors only, like every model file agentprm reads."""
    if not (folder / ADAPTER_WEIGHTS).is_file():
        pickled = sorted(p.name for p in folder.glob("adapter_model*.bin"))
        raise UserError(f"{folder}: no {ADAPTER_WEIGHTS}" + (f" ({pickled[0]} is a pickle: agentprm does not "
                        "unpickle model files)" if pickled else ""))
    chain = [folder.resolve()]   # an adapter whose base chain comes back to it recursed until Python gave up
    while (chain[-1] / ADAPTER_CONFIG).is_file():
        chain.append(adapter_base(chain[-1]).resolve())
        if chain[-1] in chain[:-1]:
            raise UserError(f"{folder}: its adapters' bases form a loop ({' -> '.join(map(str, chain))})")
    base = load_base(adapter_base(folder))
    try:
        model = PeftModel.from_pretrained(base, folder, is_trainable=False).merge_and_unload()
    except Exception as e:   # peft raises ValueError/KeyError/RuntimeError on an adapter that does not fit
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"{folder}: cannot apply the adapter to its base ({type(e).__name__}: {first[:300]})") \
            from None
    name_base(model, folder)   # a LoRA trained on top of it names this folder as its base
    return model
