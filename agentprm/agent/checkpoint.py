"""Policy checkpoints: a Hugging Face model folder (weights as safetensors, tokenizer) plus agentprm.json, the
prompt settings the policy was trained with — what `LMAgent.load` reads back. Every stage that writes a policy
(SFT, online DPO, kl-distill, GRPO/SPRO, PRIME) writes it here. A model trained with LoRA adapters is saved as
peft's adapter folder (its base named inside), or merged into full weights with `merge` (models/lora.py)."""
from __future__ import annotations

from pathlib import Path

from agentprm.agent.encoding import PromptConfig
from agentprm.outputs import atomic_dir
from agentprm.train.distributed import is_main


def save_policy(model, tokenizer, out_dir: str | Path, prompt: PromptConfig, merge: bool = False, **extra) -> Path:
    """Write model + tokenizer + agentprm.json (`extra` goes into it) to a temp folder, then swap it into place.
    Under a data-parallel launch only the main process writes (train/distributed.py)."""
    from agentprm.models.lora import save_trained

    if not is_main():
        return Path(out_dir)

    with atomic_dir(out_dir) as tmp:
        save_trained(model, tmp, merge, what="policy")
        tokenizer.save_pretrained(tmp)
        prompt.save(tmp, **extra)
    return Path(out_dir)
