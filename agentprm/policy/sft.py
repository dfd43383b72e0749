"""Supervised fine-tuning of a policy on demonstrations (the paper's π0).

    metrics = train_sft("demos.parquet", "runs/pi0", SFTConfig())      # the recipe: tiny preset, 6,000 steps
    agent = LMAgent.load("runs/pi0")

Every (state, reply) pair of the demos (rebuilt with `replay.episode_states`) becomes one example: the prompt ids
and the reply ids from `agent.encoding`, with the loss on the reply tokens (and the closing EOS) only. The output
is an ordinary Hugging Face folder (model.safetensors, tokenizer, config) plus agentprm.json holding the
PromptConfig and the SFT config/metrics, written to a temp folder and renamed into place.
"""
from __future__ import annotations

import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.checkpoint import save_policy
from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
from agentprm.agent.replay import episode_states
from agentprm.agent.scoring import right_pad
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.agent.tokenizer import MAX_INSTANCE_NUMBER
from agentprm.data.trajectories import EpisodeRecord, StepRecord, iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.models import PRESETS, build_model, load_causal_lm, load_tokenizer
from agentprm.policy.config import SFTConfig
from agentprm.train.config import check_lora
from agentprm.train.core import num_steps, train

IGNORE = -100  # label of tokens without loss (prompt, padding)
_NAME_RE = re.compile(r"\b([a-z]+) (\d+)\b")


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]


def make_examples(tokenizer, episodes: Sequence[EpisodeRecord], cfg: PromptConfig) -> list[Example]:
    examples = []
    for episode in episodes:
        for state, reply in episode_states(episode):
            p, r = prompt_ids(tokenizer, state, cfg), reply_ids(tokenizer, reply)
            examples.append(Example(p + r, [IGNORE] * len(p) + r))
    return examples


def sft_loss(model, batch: Sequence[Example]) -> tuple[torch.Tensor, dict]:
    """Mean next-token cross-entropy over the labelled (reply) tokens. The output head runs on the positions that
    predict a labelled token only — what `model(labels=...)` computes, without a chat model's ~150,000-wide logits
    over every prompt position (bench/model_scale.py)."""
    device = next(model.parameters()).device
    ids, mask = right_pad([e.input_ids for e in batch], 0)  # any id: padding is masked and labelled IGNORE
    labels, _ = right_pad([e.labels for e in batch], IGNORE)
    targets = labels[:, 1:]
    keep = (targets != IGNORE).to(device)   # position t predicts token t + 1
    hidden = model.get_decoder()(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
    logits = model.get_output_embeddings()(hidden[:, :-1][keep])
    loss = F.cross_entropy(logits.float(), targets.to(device)[keep])
    return loss, {"weight": int(keep.sum())}   # a mean over these tokens (train/core.py)


def renumbered(episode: EpisodeRecord, rng: random.Random, copy: int) -> EpisodeRecord:
    """The episode with every "<type> <n>" name renamed by a random injective map per type (same map for the
    whole episode, so the text stays consistent)."""
    names = {m.groups() for s in episode.steps for text in (s.observation, s.action, *s.admissible)
             for m in _NAME_RE.finditer(text)}
    mapping: dict[tuple[str, str], str] = {}
    for kind in sorted({k for k, _ in names}):
        numbers = sorted({n for k, n in names if k == kind}, key=int)
        fresh = rng.sample(range(1, MAX_INSTANCE_NUMBER + 1), len(numbers))  # sorted below: order is kept
        mapping.update({(kind, n): f"{kind} {f}" for n, f in zip(numbers, sorted(fresh))})

    def rename(text: str) -> str:
        return _NAME_RE.sub(lambda m: mapping.get(m.groups(), m.group(0)), text)

    steps = [StepRecord(s.turn, rename(s.observation), tuple(map(rename, s.admissible)), rename(s.action),
                        s.reward, s.done, s.won, s.admissible_action) for s in episode.steps]
    return EpisodeRecord(f"{episode.episode_id}-r{copy}", episode.task_id, episode.task_type, episode.task,
                         episode.policy, episode.seed, steps, episode.error)


def load_demos(demos_path: str | Path, cfg: SFTConfig, seed: int = 0) -> list[EpisodeRecord]:
    episodes = [e for e in iter_episodes(read_trajectories(demos_path))
                if not e.error and e.steps and (e.won or not cfg.won_only)]
    if not episodes:
        raise UserError(f"{demos_path}: no usable demonstrations" + (" (none won)" if cfg.won_only else ""))
    rng = random.Random(seed)
    return episodes + [renumbered(e, rng, k) for k in range(cfg.renumber_copies) for e in episodes]


def init_model(cfg: SFTConfig, seed: int = 0, episodes: Sequence[EpisodeRecord] = ()):
    """The model to fine-tune: a preset gets the word-level tokenizer over the env text agentprm knows (ALFWorld's)
    plus every word of the demos — their tasks, observations, actions and admissible commands — so demos of another
    environment (ScienceWorld) are not read as unknown words; ALFWorld's demos add no word, so its vocabulary, and
    the bundled π0's recipe, stay as they were."""
    if cfg.model in PRESETS:
        tokenizer = build_tokenizer(extra_text=(text for e in episodes for s in e.steps
                                                for text in (e.task, s.observation, s.action, *s.admissible)))
        return build_model(cfg.model, tokenizer, seed=seed), tokenizer
    return load_causal_lm(cfg.model), load_tokenizer(cfg.model)


def train_sft(demos_path: str | Path, out_dir: str | Path, cfg: SFTConfig, seed: int = 0,
              progress: bool = True) -> dict:
    """Train on the demos and save the policy folder; returns the metrics (loss curve, steps, seconds, ...). `seed`:
    model init, example order, augmentation."""
    start = time.monotonic()
    if cfg.lora.r:
        from agentprm.models.lora import add_lora, trainable

        check_lora(cfg.lora)
        if cfg.model in PRESETS:
            raise UserError(f"lora: --model {cfg.model} is a preset trained from scratch, there is nothing to adapt "
                            "(give a model folder, or train every weight with --lora-r 0)")
    episodes = load_demos(demos_path, cfg, seed)
    model, tokenizer = init_model(cfg, seed, episodes)
    if cfg.lora.r:
        model = add_lora(model, cfg.lora, seed=seed)
    examples = make_examples(tokenizer, episodes, cfg.prompt)
    train_cfg = cfg.train_config(seed)
    train_cfg.log_every = max(1, num_steps(len(examples), train_cfg) // 50)  # ~50 points on the loss curve
    weak = recipe_warning(cfg, len(episodes) // (1 + cfg.renumber_copies), num_steps(len(examples), train_cfg))
    if weak:
        print(f"agentprm sft: warning: {weak}", file=sys.stderr)
    prep_s = time.monotonic() - start
    curve = train(model, examples, sft_loss, train_cfg, description="sft", progress=progress,
                  on_log=_checkpointer(model, tokenizer, Path(out_dir), cfg), length=lambda e: len(e.input_ids))
    metrics = {"examples": len(examples), "episodes": len(episodes), "steps": curve[-1]["step"],
               **({"warning": weak} if weak else {}),
               "planned_steps": num_steps(len(examples), train_cfg), "train_seconds": curve[-1]["seconds"],
               "prep_seconds": round(prep_s, 2), "final_loss": curve[-1]["loss"],
               "params": sum(p.numel() for p in model.parameters()), "loss_curve": curve,
               **({"lora": trainable(model)} if cfg.lora.r else {})}
    save_policy(model, tokenizer, out_dir, cfg.prompt, merge=cfg.lora.merge,
                sft={"config": asdict(cfg), "seed": seed, "metrics": metrics})
    metrics["seconds"] = round(time.monotonic() - start, 2)
    return metrics


RECIPE_GAMES, RECIPE_STEPS = 120, 3000   # below either, a preset trained from scratch was a dud


def recipe_warning(cfg: SFTConfig, games: int, steps: int) -> str:
    """Why this SFT run is unlikely to give a working π0, or "": a preset trained from scratch needs demos of at
    least RECIPE_GAMES games and thousands of steps (on 120 games' demos, 3 epochs — ~450 steps — won 0 of 36
    held-out games; the bundled π0: 479 games' demos with renumbered copies, 50% at 3,198 steps, 70% at 6,150:
    docs/results.md)."""
    if cfg.model not in PRESETS or (games >= RECIPE_GAMES and steps >= RECIPE_STEPS):
        return ""
    return (f"{games} demo games and {steps} steps: a '{cfg.model}' model trained from scratch has given a working "
            f"policy only from ~{RECIPE_GAMES} games and ~{RECIPE_STEPS}+ steps (the bundled π0: 479 games, "
            "renumber_copies 1, 6,150 steps); raise --steps or add demos")


def _checkpointer(model, tokenizer, out_dir: Path, cfg: SFTConfig):
    if not cfg.checkpoint_every:
        return None
    saved = [0]  # checkpoints written so far

    def on_log(step: int, row: dict) -> None:  # called every log_every steps: saves at the first log past a multiple
        if step >= (saved[0] + 1) * cfg.checkpoint_every:
            saved[0] = step // cfg.checkpoint_every
            folder = out_dir.parent / f"{out_dir.name}-checkpoints" / f"step-{step:06d}"
            save_policy(model, tokenizer, folder, cfg.prompt, sft={"step": step, "seconds": row["seconds"]})
    return on_log
