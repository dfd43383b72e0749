"""State → token ids and reply → token ids: the one encoding that SFT, the LM agent, the PRM and DPO share.

Token-in-token-out: a prompt and a reply are encoded separately and concatenated, so the ids a trainer sees
are exactly the ids the sampler scored (no decode/re-encode drift between turns). With our chat template,
`prompt_ids(state) + reply_ids(reply)` equals `apply_chat_template(messages + [assistant reply])`.

`PromptConfig` travels with every policy/PRM folder (`agentprm.json`), so a model is always prompted the way it
was trained.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from agentprm.agent.format import (DEFAULT_HISTORY_TURNS, FORMATS, SYSTEM_PROMPT, state_to_messages,
                                   steered_messages)
from agentprm.agent.state import AgentState
from agentprm.errors import UserError
from agentprm.io import parse_json, read_text, write_json

CONFIG_FILE = "agentprm.json"


MAX_SYSTEM_PROMPT = 4096   # characters (a 60,000-word system prompt made every prompt ~100 k tokens: hours per epoch)


@dataclass(frozen=True)
class PromptConfig:
    show_admissible: bool = False            # list the admissible commands in the prompt
    history_turns: int = DEFAULT_HISTORY_TURNS  # earlier (action, observation) turns shown besides the current one
    format: str = "alfworld"                 # alfworld: + the memory parsed from ALFWorld's text; plain: task and
                                             # turns only, for other environments (agent/format.py)
    system_prompt: str = SYSTEM_PROMPT

    def __post_init__(self):
        if self.format not in FORMATS:
            raise UserError(f"prompt format {self.format!r}: expected one of {', '.join(FORMATS)}")
        if not isinstance(self.system_prompt, str):
            raise UserError(f"prompt system_prompt must be a string, got {self.system_prompt!r}")
        if len(self.system_prompt) > MAX_SYSTEM_PROMPT:   # it is in every prompt of every turn
            raise UserError(f"prompt system_prompt: {len(self.system_prompt):,} characters; at most "
                            f"{MAX_SYSTEM_PROMPT:,} (it is repeated in the prompt of every turn)")

    def save(self, folder: str | Path, **extra) -> None:
        write_json(Path(folder) / CONFIG_FILE, {"prompt": asdict(self), **extra})

    @classmethod
    def load(cls, folder: str | Path) -> "PromptConfig":
        path = Path(folder) / CONFIG_FILE
        if not path.exists():      # any plain HF model folder: default prompt
            return cls()
        meta = read_json_object(path)
        prompt = meta.get("prompt", {})
        try:
            if not isinstance(prompt, dict):
                raise TypeError(f"a mapping is needed, got {type(prompt).__name__}")
            return cls(**prompt)
        except (TypeError, UserError) as e:
            raise UserError(f"{path}: bad field 'prompt' ({e})") from None


def read_json_object(path: Path) -> dict:
    """A JSON object from `path` (an agentprm.json); a one-line error for anything else."""
    data = parse_json(read_text(path), path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


def check_policy_folder(folder: Path) -> None:
    """A one-line error for a folder agentprm saved as something other than a policy — a PRM or a value model names
    its `kind` in agentprm.json — given where a policy is read (a PRM folder would otherwise play as one: its
    backbone loads as a causal LM with an untrained output layer). A file that does not parse is left to the loader."""
    path = folder / CONFIG_FILE
    try:
        kind = json.loads(path.read_text()).get("kind") if path.is_file() else None
    except (ValueError, AttributeError, OSError):
        return
    if kind:
        raise UserError(f"{folder}: a {kind} folder ({CONFIG_FILE} kind {kind!r}), not a policy (a PRM is given "
                        "with --prm)")


def prompt_ids(tokenizer, state: AgentState, cfg: PromptConfig, steered: bool = False) -> list[int]:
    """`steered` selects the steered-exploration variant of the prompt (format.steered_messages)."""
    if steered:
        messages = steered_messages(state, history_turns=cfg.history_turns, fmt=cfg.format,
                                    system_prompt=cfg.system_prompt)
    else:
        messages = state_to_messages(state, show_admissible=cfg.show_admissible, history_turns=cfg.history_turns,
                                     fmt=cfg.format, system_prompt=cfg.system_prompt)
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"])


def reply_ids(tokenizer, reply: str) -> list[int]:
    """The reply's tokens closed by the chat template's end-of-turn token (`end_of_turn_id`)."""
    return tokenizer(reply, add_special_tokens=False)["input_ids"] + [end_of_turn_id(tokenizer)]


_MARK = "agentprm-end-of-turn-probe"


def end_of_turn_id(tokenizer) -> int:
    """The token the chat template closes an assistant turn with: what a reply ends with and generation stops at.
    Often the eos token (ours, Llama-3's base template), not always (Qwen's <|im_end|> vs eos <|endoftext|>): found
    by rendering a one-turn conversation and taking the first special token after the assistant's text; the eos
    token when the template adds none. Cached on the tokenizer."""
    cached = getattr(tokenizer, "_agentprm_end_of_turn", None)
    if cached is not None:
        return cached
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK}],
                                         tokenize=False)
    after = tokenizer(text.split(_MARK, 1)[-1], add_special_tokens=False)["input_ids"] if _MARK in text else []
    special = set(tokenizer.all_special_ids)
    found = next((t for t in after if t in special), tokenizer.eos_token_id)
    tokenizer._agentprm_end_of_turn = found
    return found
