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
from agentprm.agent.format import parse_reply
from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.agent.scoring import right_pad
from agentprm.agent.state import AgentState
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.agent.tokenizer import MAX_INSTANCE_NUMBER
from agentprm.data.trajectories import EpisodeRecord, StepRecord, iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.models import PRESETS, build_model, load_causal_lm, load_tokenizer
from agentprm.policy.config import SFTConfig
from agentprm.train.config import check_lora
from agentprm.tracking import active
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


def usable_demos(demos_path: str | Path, cfg: SFTConfig) -> list[EpisodeRecord]:
    episodes = [e for e in iter_episodes(read_trajectories(demos_path))
                if not e.error and e.steps and (e.won or not cfg.won_only)]
    if not episodes:
        raise UserError(f"{demos_path}: no usable demonstrations" + (" (none won)" if cfg.won_only else ""))
    return episodes


def augmented(episodes: list[EpisodeRecord], cfg: SFTConfig, seed: int = 0) -> list[EpisodeRecord]:
    """The episodes and `cfg.renumber_copies` renumbered copies of each."""
    rng = random.Random(seed)
    return episodes + [renumbered(e, rng, k) for k in range(cfg.renumber_copies) for e in episodes]


def load_demos(demos_path: str | Path, cfg: SFTConfig, seed: int = 0) -> list[EpisodeRecord]:
    """Every usable demo and its renumbered copies (no validation split)."""
    return augmented(usable_demos(demos_path, cfg), cfg, seed)


VAL_MIN_GAMES = 10   # fewer demo games than this: none is held out (a game or two measures nothing)
VAL_STATES = 256     # states scored per measurement, held-out and training alike
VAL_POINTS = 10      # measurements over a run when `val_every` is 0


def split_games(episodes: Sequence[EpisodeRecord], frac: float, seed: int) -> tuple[list, list]:
    """(train, validation): floor(frac × games) whole games held out, drawn with `seed`; none below VAL_MIN_GAMES.
    A game's episodes all go to one side, so no held-out state was seen in training."""
    games = sorted({e.task_id for e in episodes})
    held = set(random.Random(seed).sample(games, int(frac * len(games)) if len(games) >= VAL_MIN_GAMES else 0))
    return [e for e in episodes if e.task_id not in held], [e for e in episodes if e.task_id in held]


def command_states(episodes: Sequence[EpisodeRecord], limit: int = VAL_STATES) -> list[tuple[AgentState, str]]:
    """Up to `limit` (state, demonstrated command) pairs spread evenly over the demos' states, those whose command
    is one of the state's admissible commands (what choose mode can pick)."""
    pairs = [(state, parse_reply(reply)[1]) for e in episodes for state, reply in episode_states(e)]
    pairs = [(state, command) for state, command in pairs if command in state.admissible]
    if len(pairs) > limit:
        pairs = [pairs[i * len(pairs) // limit] for i in range(limit)]
    return pairs


def next_command_accuracy(model, tokenizer, prompt: PromptConfig, pairs: Sequence[tuple[AgentState, str]]) -> float:
    """The fraction of `pairs` whose demonstrated command the policy ranks first among the admissible commands
    (greedy choose mode: `LMAgent.act`), the model left in the mode it was in."""
    agent = LMAgent(model, tokenizer, prompt, mode="choose")
    training = model.training
    model.eval()
    with torch.no_grad():
        picks = agent.act([state for state, _ in pairs], [None] * len(pairs))
    model.train(training)
    return sum(pick == command for pick, (_, command) in zip(picks, pairs)) / max(1, len(pairs))


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
    train_games, val_games = split_games(usable_demos(demos_path, cfg), cfg.val_frac, seed)
    episodes = augmented(train_games, cfg, seed)
    model, tokenizer = init_model(cfg, seed, episodes)
    if cfg.lora.r:
        model = add_lora(model, cfg.lora, seed=seed)
    examples = make_examples(tokenizer, episodes, cfg.prompt)
    train_cfg = cfg.train_config(seed)
    train_cfg.log_every = max(1, num_steps(len(examples), train_cfg) // 50)  # ~50 points on the loss curve
    weak = recipe_warning(cfg, len(episodes) // (1 + cfg.renumber_copies), num_steps(len(examples), train_cfg))
    if weak:
        print(f"agentprm sft: warning: {weak}", file=sys.stderr)
    validation = Validation(model, tokenizer, cfg, train_games, val_games, num_steps(len(examples), train_cfg))
    checkpointer = _checkpointer(model, tokenizer, Path(out_dir), cfg)
    prep_s = time.monotonic() - start
    curve = train(model, examples, sft_loss, train_cfg, description="sft", progress=progress,
                  on_log=lambda step, row: bool(validation(step) or (checkpointer and checkpointer(step, row))),
                  length=lambda e: len(e.input_ids))
    report = validation.finish(curve[-1]["step"])
    weak = "; ".join(w for w in (weak, report.get("warning", "")) if w)
    if report.get("warning"):
        print(f"agentprm sft: warning: {report['warning']}", file=sys.stderr)
    metrics = {"examples": len(examples), "episodes": len(episodes), "steps": curve[-1]["step"],
               **({"warning": weak} if weak else {}), "validation": report,
               "planned_steps": num_steps(len(examples), train_cfg), "train_seconds": curve[-1]["seconds"],
               "prep_seconds": round(prep_s, 2), "final_loss": curve[-1]["loss"],
               "params": sum(p.numel() for p in model.parameters()), "loss_curve": curve,
               **({"lora": trainable(model)} if cfg.lora.r else {})}
    save_policy(model, tokenizer, out_dir, cfg.prompt, merge=cfg.lora.merge,
                sft={"config": asdict(cfg), "seed": seed, "metrics": metrics})
    metrics["seconds"] = round(time.monotonic() - start, 2)
    return metrics


class Validation:
    """Next-command accuracy on the held-out demo games (and, beside it, on as many states of the training games)
    every `val_every` steps and at the end; with `keep_best`, the weights of the best held-out measurement are put
    back at the end. `finish` gives the record saved with the model: games, states, the final and best accuracies,
    the curve, and a warning when the policy is unlikely to work."""

    def __init__(self, model, tokenizer, cfg: SFTConfig, train_games: Sequence[EpisodeRecord],
                 val_games: Sequence[EpisodeRecord], steps: int):
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.games = len({e.task_id for e in val_games})
        self.held_out, self.seen = command_states(val_games), command_states(train_games)
        self.every = cfg.val_every or max(1, steps // VAL_POINTS)
        self.curve: list[dict] = []
        self.measured = 0   # multiples of `every` measured so far
        self.best: tuple[float, int, dict | None] = (-1.0, 0, None)   # accuracy, step, weights (keep_best)

    def __call__(self, step: int) -> None:   # an on_log hook: measures at the first log past each multiple of `every`
        if self.held_out and step >= (self.measured + 1) * self.every:
            self.measured = step // self.every
            self.measure(step)

    def measure(self, step: int) -> None:
        accuracy = next_command_accuracy(self.model, self.tokenizer, self.cfg.prompt, self.held_out)
        seen = next_command_accuracy(self.model, self.tokenizer, self.cfg.prompt, self.seen)
        self.curve.append({"step": step, "accuracy": round(accuracy, 4), "train_accuracy": round(seen, 4)})
        tracker = active()
        if tracker:
            tracker.log({"val_accuracy": accuracy, "train_accuracy": seen}, step, scope=tracker.scope or "sft")
        if accuracy > self.best[0]:
            weights = ({k: v.detach().clone() for k, v in self.model.state_dict().items()}
                       if self.cfg.keep_best else None)
            self.best = (accuracy, step, weights)

    def finish(self, step: int) -> dict:
        if not self.held_out:
            return {"games": self.games, "states": 0, "note": f"no validation: val_frac {self.cfg.val_frac:g} of "
                    f"the demo games (none is held out below {VAL_MIN_GAMES} games)"}
        if not self.curve or self.curve[-1]["step"] != step:
            self.measure(step)
        final = self.curve[-1]
        best_accuracy, best_step, weights = self.best
        if weights is not None and best_step != step:
            self.model.load_state_dict(weights)
        saved = best_step if self.cfg.keep_best else step
        accuracy = next(p for p in self.curve if p["step"] == saved)
        report = {"games": self.games, "states": len(self.held_out), "accuracy": accuracy["accuracy"],
                  "train_accuracy": accuracy["train_accuracy"], "saved_step": saved,
                  "best": {"step": best_step, "accuracy": round(best_accuracy, 4)}, "curve": self.curve}
        warning = accuracy_warning(accuracy["accuracy"], accuracy["train_accuracy"])
        return {**report, **({"warning": warning} if warning else {})}


VAL_ACCURACY_WARN = 0.85   # held-out next-command accuracy below which a policy is unlikely to work (see below)
VAL_GAP_WARN = 0.10        # training minus held-out accuracy above which it has memorised its games


def accuracy_warning(held_out: float, seen: float) -> str:
    """Why a policy with these next-command accuracies is unlikely to work, or "". An error compounds over the 10-30
    turns of a game: the tiny preset after 1,500 steps on 120 games' demos ranks the expert's command first in 81.6% of
    the states of its 11 held-out demo games and wins 13.9% of 36 eval games, where the bundled π0 wins 69.4% (and
    ranks it first in 91.6% of those eval games' states, the 1,500-step policy in 71.2%): docs/studies/sft-validation.md."""
    if held_out < VAL_ACCURACY_WARN:
        return (f"held-out next-command accuracy {held_out:.1%} is below {VAL_ACCURACY_WARN:.0%}: this policy is "
                "unlikely to work (81.6% after 1,500 steps on 120 games won 13.9% of eval games; the bundled π0 "
                "wins 69.4%); train longer, on more demos, or from a pretrained model")
    if seen - held_out > VAL_GAP_WARN:
        return (f"held-out next-command accuracy {held_out:.0%} is {seen - held_out:.0%} below the training "
                f"games' {seen:.0%}: the policy memorised its games; add demos or renumbered copies")
    return ""


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
