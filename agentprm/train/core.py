"""The one training loop. A loss is a callable `loss_fn(model, batch) -> (loss, metrics)`; the loop owns
optimisation (AdamW, linear warm-up then cosine decay, grad clipping), seeding, progress and a wall-clock budget,
so SFT, PRM (soft-BCE, Bradley-Terry, …) and DPO differ only in their data and their loss. It also owns gradient
accumulation (`grad_accum` micro-batches per step) and data parallelism over processes (train/distributed.py): a
loss that is a mean over something other than the batch's examples (SFT: tokens) says so with a "weight" metric,
so that pieces of a batch add up to exactly the batch's mean. Under the process's device settings (models/device.py)
it computes the forward passes in bfloat16 (`mixed_precision: bf16`, float32 weights and optimizer) and recomputes
activations in the backward pass (`gradient_checkpointing`); inside a `resumable` block it keeps a checkpoint that a
killed training resumes from (train/checkpoint.py).

Why not accelerate's `Accelerator` for this loop: its data parallelism wraps the model in DDP, whose gradient sync
runs only through `model(...)`, while our losses call the model's own methods (a PRM's `logits_of`, a policy's
scoring); and its accumulation averages micro-batches equally, where SFT's token mean needs them weighted. The
all-reduce here is one call (train/distributed.py), tested against a single process at the same global batch."""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
from contextlib import nullcontext
from typing import Callable, Iterator, Sequence

import torch
from transformers import PreTrainedModel

from agentprm.errors import UserError
from agentprm.models.device import training_options
from agentprm.progress import progress_bar
from agentprm.tracking import active
from agentprm.train.checkpoint import active_checkpoints
from agentprm.train.config import TrainConfig
from agentprm.train.distributed import is_main, rank_and_size, sum_over_processes


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


BUCKET_BATCHES = 32  # length bucketing sorts windows of this many batches


def batches(examples: Sequence, batch_size: int, epochs: float, seed: int,
            length: Callable[[object], int] | None = None) -> Iterator[list]:
    """Shuffled minibatches for `epochs` passes; the same seed gives the same order. With `length`, each window of
    BUCKET_BATCHES batches of the shuffled order is sorted by length before it is cut into batches (then the batches
    are shuffled): rows of a padded batch have similar lengths. (Why: on the 507 SFT examples of 36 games' expert
    demos, 74-435 tokens, random batches of 16 padded to 1.53x the real tokens.) Datasets smaller than one window
    are not bucketed."""
    rng = random.Random(seed)
    total = max(1, math.ceil(len(examples) * epochs / batch_size))
    if len(examples) < batch_size * BUCKET_BATCHES:  # a window would span several passes: repeats in a batch
        length = None
    order: list[int] = []
    window: list[list[int]] = []
    for _ in range(total):
        if not window:
            while len(order) < batch_size * BUCKET_BATCHES:
                fresh = list(range(len(examples)))
                rng.shuffle(fresh)
                order += fresh
            chunk, order = order[:batch_size * BUCKET_BATCHES], order[batch_size * BUCKET_BATCHES:]
            if length is not None:
                chunk.sort(key=lambda i: length(examples[i]))
            window = [chunk[k:k + batch_size] for k in range(0, len(chunk), batch_size)]
            if length is not None:
                rng.shuffle(window)
        yield [examples[i] for i in window.pop(0)]


def num_steps(n_examples: int, cfg: TrainConfig) -> int:
    """`cfg.steps`, or as many as `cfg.epochs` passes over the examples take, at most `cfg.max_steps`."""
    by_epochs = max(1, math.ceil(n_examples * cfg.epochs / cfg.batch_size))
    return cfg.steps or min(by_epochs, cfg.max_steps or by_epochs)


def train(model: torch.nn.Module, examples: Sequence, loss_fn: Callable, cfg: TrainConfig,
          description: str = "train", progress: bool = True,
          on_log: Callable[[int, dict], bool | None] | None = None,
          length: Callable[[object], int] | None = None) -> list[dict]:
    """Optimise `loss_fn` over `examples`; returns the logged metrics (one dict per `log_every` steps).
    `length(example)` turns on length-bucketed batches (see `batches`).
    `on_log(step, row)` sees each logged row; returning True stops training after that step (a monitor's alarm)."""
    seed_everything(cfg.seed)
    rank, size = rank_and_size()
    steps = num_steps(len(examples), cfg)
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    params = list(named.values())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = max(1, int(cfg.warmup_frac * steps))
    start = time.monotonic()

    def done_frac(s: int) -> float:
        # With a time budget the cosine follows whichever runs out first, steps or seconds, so a run cut by the
        # budget still ends at a decayed learning rate instead of mid-schedule.
        frac = s / steps
        if cfg.time_budget_s:
            frac = max(frac, (time.monotonic() - start) / cfg.time_budget_s)
        return min(1.0, frac)

    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * done_frac(s))))
    precision, checkpointing = training_options()
    if checkpointing:
        checkpoint_activations(model)
    model.train()
    history, window = [], []
    tracker, checkpoints = active(), active_checkpoints()
    slot = checkpoints.slot(fingerprint(description, len(examples), cfg.to_dict(), named)) if checkpoints else None
    resumed = slot.load(named, opt, sched) if slot else None
    done = resumed["step"] if resumed else 0
    if resumed:
        history, window = resumed["history"], resumed["window"]
    with progress_bar(steps, description, progress and is_main()) as bar:
        passes = steps * cfg.batch_size / max(1, len(examples))   # = cfg.epochs unless steps are given or capped
        for step, batch in zip(range(1, steps + 1), batches(examples, cfg.batch_size, passes, cfg.seed, length)):
            if resumed and (step <= done or resumed["finished"]):   # the same batches, already trained on
                bar.advance()
                continue
            opt.zero_grad(set_to_none=True)
            if size == 1 and cfg.grad_accum == 1:
                with autocast(model, precision):
                    loss, metrics = loss_fn(model, batch)
                loss.backward()
                metrics.pop("weight", None)
                loss = float(loss.detach())
            else:
                loss, metrics = accumulate(model, loss_fn, batch[rank::size], cfg.grad_accum, params, precision)
            if not math.isfinite(loss):   # the same on every process: the loss is the batch's, summed over them
                raise UserError(f"{description}: the loss is {loss} at step {step} (learning rate {cfg.lr:g}); "
                                "training stopped and nothing was saved — lower the learning rate, or train in "
                                "float32 (--dtype float32)")
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
            window.append({"loss": loss, **metrics})
            bar.advance()
            if tracker and step % tracker.report_every == 0 and is_main():   # live points, beside the logged history
                tracker.log({"loss": loss, "lr": sched.get_last_lr()[0], **metrics}, step,
                            scope=tracker.scope or description)
            out_of_time = cfg.time_budget_s and time.monotonic() - start > cfg.time_budget_s
            stop = False
            if step % cfg.log_every == 0 or step == steps or out_of_time:
                row = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
                row.update(step=step, seconds=round(time.monotonic() - start, 2), lr=sched.get_last_lr()[0])
                history.append(row)
                window = []
                stop = bool(on_log and on_log(step, row))
            if size > 1:   # every process stops at the same step (clocks and monitors may disagree)
                flag = torch.tensor([float(bool(out_of_time or stop))])
                sum_over_processes(flag)
                out_of_time = stop = bool(flag.item())
            ending = bool(out_of_time or stop or step == steps)
            if slot and is_main() and (ending or slot.due()):
                slot.save(step, named, opt, sched, history, window, finished=ending)
            if out_of_time or stop:
                break
    model.eval()
    return history


def fingerprint(description: str, n_examples: int, config: dict, named: dict[str, torch.Tensor]) -> dict:
    """What makes a checkpoint this training's (train/checkpoint.py): a slot saved by another is not resumed."""
    shapes = hashlib.sha256(json.dumps([(n, list(p.shape)) for n, p in named.items()]).encode()).hexdigest()
    return {"description": description, "examples": n_examples, "config": config, "parameters": shapes}


def autocast(model: torch.nn.Module, precision: str):
    """The forward passes of a step in bfloat16 under mixed precision (weights, gradients and the optimizer stay in
    the weights' dtype; the backward pass runs outside, as torch.autocast asks), else nothing."""
    if precision != "bf16":
        return nullcontext()
    return torch.autocast(device_type=next(model.parameters()).device.type, dtype=torch.bfloat16)


def checkpoint_activations(model: torch.nn.Module) -> None:
    """Gradient checkpointing on the model's Hugging Face backbone (the outermost PreTrainedModel: a policy, a PRM's
    language model, a LoRA-wrapped one), non-reentrant so that frozen inputs (LoRA) still get gradients."""
    backbone = next((m for m in model.modules() if isinstance(m, PreTrainedModel)), None)
    if backbone is None:
        raise UserError("gradient_checkpointing: the model has no Hugging Face backbone to checkpoint")
    backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def accumulate(model: torch.nn.Module, loss_fn: Callable, local: Sequence, micro: int,
               params: list[torch.Tensor], precision: str = "no") -> tuple[float, dict]:
    """Gradients of one step from `micro` pieces of this process's share of the batch, summed over processes:
    Σ w·∇loss / Σ w, with w each piece's weight (its examples, or the loss's "weight" metric) — the gradient of the
    whole batch's mean loss. Returns that mean loss and this process's metrics averaged over its pieces."""
    pieces = [local[k::micro] for k in range(micro) if local[k::micro]]
    total = torch.zeros(2)            # Σ w, Σ w·loss
    seen: list[dict] = []
    for piece in pieces:
        with autocast(model, precision):
            loss, metrics = loss_fn(model, piece)
        weight = float(metrics.pop("weight", len(piece)))
        (loss * weight).backward()
        total += torch.tensor([weight, weight * float(loss.detach())])
        seen.append(metrics)
    grads = []
    for p in params:                  # a process with nothing to do still takes part in the sum
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    sum_over_processes(total, *grads)
    for g in grads:
        g.div_(total[0].item())
    metrics = {k: sum(m[k] for m in seen) / len(seen) for k in seen[0]} if seen else {}
    return total[1].item() / total[0].item(), metrics
