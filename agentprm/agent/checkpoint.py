"""Policy checkpoints: a Hugging Face model folder (weights as safetensors, tokenizer) plus agentprm.json, the
prompt settings the policy was trained with — what `LMAgent.load` reads back. Every stage that writes a policy
(SFT, online DPO, kl-distill, GRPO/SPRO, PRIME) writes it here."""
from __future__ import annotations

from pathlib import Path

from agentprm.agent.encoding import PromptConfig
from agentprm.io import atomic_dir


def save_policy(model, tokenizer, out_dir: str | Path, prompt: PromptConfig, **extra) -> Path:
    """Write model + tokenizer + agentprm.json (`extra` goes into it) to a temp folder, then swap it into place."""
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        prompt.save(tmp, **extra)
    return Path(out_dir)
