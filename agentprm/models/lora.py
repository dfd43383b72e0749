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
import os
from pathlib import Path
from typing import Callable

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, TaskType, get_peft_model
from transformers.pytorch_utils import Conv1D

from agentprm import __version__
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


def save_trained(model, folder: str | Path, merge: bool = False, what: str = "model") -> None:
    """Write a trained model's weights into `folder`: a peft model's adapter (peft's layout), or with `merge` its
    merged full weights (the adapters are folded into the model, which stays usable); any other model in full. Then
    its model card (`what` it is: "policy", "PRM")."""
    peft = isinstance(model, PeftModel)
    base = (model.peft_config["default"].base_model_name_or_path if peft else getattr(model, "name_or_path", "")) or ""
    (model.merge_and_unload() if peft and merge else model).save_pretrained(folder)
    write_card(Path(folder), what, base, adapter=peft and not merge)


def portable_name(base: str, folder: Path) -> tuple[str, bool]:
    """How a card names the model `folder` was trained from, with nothing of the training machine in it, and whether
    that is a Hub id: a snapshot of the Hugging Face cache by its id, a folder by its path relative to `folder` (a
    run folder moves as a whole)."""
    parts = Path(base).parts
    cached = next((p for p in parts if p.startswith("models--")), None)
    if cached and "snapshots" in parts:
        return cached.removeprefix("models--").replace("--", "/"), True
    return (os.path.relpath(base, Path(folder).resolve()) if Path(base).is_absolute() else base), False


def write_card(folder: Path, what: str, base: str, adapter: bool) -> None:
    """README.md, Hugging Face's model card: what the folder is and how to load it. (peft's own template named the
    base by the absolute path of the machine that trained it.)"""
    name, hub = portable_name(base, folder) if base else ("", False)
    weights = (f"LoRA adapters (peft) on `{name}`" if adapter else
               f"full weights, trained from `{name}`" if name else "full weights, trained from scratch")
    load = {"policy": "agentprm.agent.lm.LMAgent.load(folder)", "PRM": "agentprm.prm.loading.load_prm(folder)"}
    lines = ["---", f"library_name: {'peft' if adapter else 'transformers'}", f"tags: [agentprm, {what.lower()}]",
             *([f"base_model: {name}"] if hub else []), "---", "", f"# An agentprm {what}", "",
             f"{weights}; agentprm {__version__}. `agentprm.json` holds the prompt settings it was trained with and "
             "how it was trained.", "",
             f"Load with `{load.get(what, 'transformers.AutoModelForCausalLM.from_pretrained(folder)')}`"
             + (" (the base is read from `adapter_config.json`)." if adapter else ".")]
    (folder / "README.md").write_text("\n".join(lines) + "\n")


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
