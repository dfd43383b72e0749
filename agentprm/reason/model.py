"""The reasoning policy: a causal LM that reads a problem and writes a worked solution — a tiny model trained here
from scratch, or any Hugging Face causal LM from a local folder (the same loaders, devices and LoRA as the agent).

    model, tok = train_reasoner(pairs, "runs/reasoner", ReasonerConfig())    # SFT on (problem, solution) pairs
    texts = sample(model, tok, problems, n=4, temperature=1.0, seed=0)

Prompt and response: the problem's question is the user message of the tokenizer's chat template, the solution the
assistant's reply (closed by the template's end-of-turn token); SFT puts the loss on the reply only
(policy/sft.py's example and loss). The tiny model's tokenizer (`reasoning_tokenizer`) is word-level with *each digit
a token*, so it can learn column arithmetic rather than a table of numbers; decoding joins the digits back, so
"37 + 58 = 95" round-trips.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from tokenizers import Regex

from agentprm.agent.encoding import end_of_turn_id, reply_ids
from agentprm.agent.lm import HFBackend
from agentprm.agent.tokenizer import word_level_tokenizer
from agentprm.errors import require
from agentprm.io import write_json
from agentprm.models import PRESETS, build_model, load_causal_lm, load_tokenizer
from agentprm.outputs import atomic_dir
from agentprm.policy.sft import IGNORE, Example, sft_loss
from agentprm.reason.check import ANSWER_PREFIX
from agentprm.reason.config import ReasonerConfig
from agentprm.reason.problems import OP_WORDS, Problem
from agentprm.reason.solutions import solution_mix
from agentprm.train.config import check_lora
from agentprm.train.core import train

DIGIT_PATTERN = r"\n|\d|[^\W\d]+|[^\w\s]"
DIGIT_FIXES = ((Regex(r"(?<=\d) (?=\d)"), ""),)
CONFIG_FILE = "agentprm.json"


def reasoning_tokenizer(texts: Sequence[str] = ()):
    """Word-level, one digit a token: the chain family's words plus every word of `texts` (the problems)."""
    base = [" ".join(OP_WORDS.values()), "Start with . What is the result ?", ANSWER_PREFIX, "0123456789 + - * ="]
    return word_level_tokenizer([*base, *texts], DIGIT_PATTERN, DIGIT_FIXES)


def prompt_ids(tokenizer, problem: Problem) -> list[int]:
    return list(tokenizer.apply_chat_template([{"role": "user", "content": problem.question}],
                                              add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])


def response_text(tokenizer, ids: Sequence[int], end: int) -> str:
    """A generated response's text: its tokens without the end-of-turn token (and specials)."""
    return tokenizer.decode([t for t in ids if t != end], skip_special_tokens=True)


def init_reasoner(cfg: ReasonerConfig, texts: Sequence[str], seed: int):
    if cfg.model in PRESETS:
        tokenizer = reasoning_tokenizer(texts)
        return build_model(cfg.model, tokenizer, seed=seed), tokenizer
    return load_causal_lm(cfg.model), load_tokenizer(cfg.model)


def sft_examples(tokenizer, pairs: Sequence[tuple[Problem, str]]) -> list[Example]:
    examples = []
    for problem, solution in pairs:
        p, r = prompt_ids(tokenizer, problem), reply_ids(tokenizer, solution)
        examples.append(Example(p + r, [IGNORE] * len(p) + r))
    return examples


def train_reasoner(pairs: Sequence[tuple[Problem, str]], out_dir: str | Path | None, cfg: ReasonerConfig,
                   seed: int = 0, progress: bool = True):
    """SFT on (problem, solution) pairs; saves the model folder (safetensors, tokenizer, agentprm.json with the
    config and loss curve) when `out_dir` is given. Returns (model, tokenizer, metrics)."""
    from agentprm.models.lora import add_lora, save_trained   # peft: only when adapters are asked for, or saved

    start = time.monotonic()
    if cfg.lora.r:
        check_lora(cfg.lora)
        require(cfg.model not in PRESETS, f"lora: --model {cfg.model} is a preset trained from scratch, there is "
                "nothing to adapt (give a model folder, or train every weight with --lora-r 0)")
    model, tokenizer = init_reasoner(cfg, [t for p, s in pairs for t in (p.question, s)], seed)
    if cfg.lora.r:
        model = add_lora(model, cfg.lora, seed=seed)
    examples = sft_examples(tokenizer, pairs)
    curve = train(model, examples, sft_loss, cfg.train_config(seed), description="reason sft", progress=progress,
                  length=lambda e: len(e.input_ids))
    metrics = {"examples": len(examples), "steps": curve[-1]["step"], "final_loss": curve[-1]["loss"],
               "params": sum(p.numel() for p in model.parameters()), "seconds": round(time.monotonic() - start, 2),
               "loss_curve": curve}
    if out_dir is not None:
        with atomic_dir(out_dir) as tmp:
            save_trained(model, tmp, cfg.lora.merge, what="reasoner")
            tokenizer.save_pretrained(tmp)
            write_json(tmp / CONFIG_FILE, {"reasoner": {"config": asdict(cfg), "seed": seed, "metrics": metrics}})
    return model, tokenizer, metrics


def load_reasoner(path: str | Path):
    return load_causal_lm(path), load_tokenizer(path)


def reasoner_for(folder: str | Path, problems: Sequence[Problem], cfg: ReasonerConfig, seed: int,
                 progress: bool = True):
    """The reasoner SFT'd on worked solutions of `problems` (solutions.py `solution_mix` with the config's mix),
    trained into `folder` unless a finished one is there already (a study resumes past it); loaded."""
    if not (Path(folder) / CONFIG_FILE).is_file():
        train_reasoner(solution_mix(problems, seed, cfg.per_problem, cfg.merge, cfg.noisy), folder, cfg, seed, progress)
    return load_reasoner(folder)


class HFCompleter:
    """Continuations of solution prefixes by a local causal LM (labels.py's `Completer`); with an empty prefix, whole
    solutions (`sample`). `stop_ids`: more tokens that end a continuation (search.py's `StepSampler`: the newline)."""

    def __init__(self, model, tokenizer, temperature: float = 1.0, max_new_tokens: int = 160,
                 stop_ids: Sequence[int] = ()):
        self.tokenizer, self.temperature, self.max_new_tokens = tokenizer, temperature, max_new_tokens
        self.end = end_of_turn_id(tokenizer)
        self.backend = HFBackend(model, tokenizer.pad_token_id, self.end, stop_ids)

    def generate_ids(self, problems: Sequence[Problem], prefixes: Sequence[str], n: int, seed: int,
                     chunk: int = 64) -> list[list[list[int]]]:
        """The token ids of `n` continuations of each (problem, prefix text), about `chunk` sequences a call."""
        prompts = [prompt_ids(self.tokenizer, p) + self.tokenizer(x, add_special_tokens=False)["input_ids"]
                   for p, x in zip(problems, prefixes)]
        out: list[list[list[int]]] = []
        per_call = max(1, chunk // n)
        for k in range(0, len(prompts), per_call):
            out += self.backend.generate(prompts[k:k + per_call], n, self.temperature, self.max_new_tokens, seed + k)
        return out

    def complete(self, problems: Sequence[Problem], prefixes: Sequence[str], n: int, seed: int,
                 chunk: int = 64) -> list[list[str]]:
        return [[response_text(self.tokenizer, seq, self.end) for seq in ids]
                for ids in self.generate_ids(problems, prefixes, n, seed, chunk)]


def sample(model, tokenizer, problems: Sequence[Problem], n: int = 1, temperature: float = 1.0, seed: int = 0,
           max_new_tokens: int = 160) -> list[list[str]]:
    """`n` solutions of each problem (temperature 0: greedy)."""
    return HFCompleter(model, tokenizer, temperature, max_new_tokens).complete(problems, [""] * len(problems), n, seed)
