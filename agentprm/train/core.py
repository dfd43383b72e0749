"""The one training loop. A loss is a callable `loss_fn(model, batch) -> (loss, metrics)`; the loop owns
optimisation (AdamW, linear warm-up then cosine decay, grad clipping), seeding, progress and a wall-clock budget,
so SFT, PRM (soft-BCE, Bradley-Terry, …) and DPO differ only in their data and their loss."""
from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Sequence

import torch

from agentprm.progress import progress_bar


@dataclass
class TrainConfig:
    lr: float = 1e-3            # peak learning rate
    epochs: float = 1.0         # passes over the examples (fractional allowed)
    batch_size: int = 16
    warmup_frac: float = 0.05   # share of steps with linear warm-up
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    time_budget_s: float = 0.0  # stop early after this many seconds (0 = no budget)
    seed: int = 0
    log_every: int = 50

    def to_dict(self) -> dict:
        return asdict(self)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def batches(examples: Sequence, batch_size: int, epochs: float, seed: int) -> Iterator[list]:
    """Shuffled minibatches for `epochs` passes; the same seed gives the same order."""
    rng = random.Random(seed)
    total = max(1, math.ceil(len(examples) * epochs / batch_size))
    order: list[int] = []
    for _ in range(total):
        if len(order) < batch_size:
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order += fresh
        yield [examples[i] for i in order[:batch_size]]
        order = order[batch_size:]


def num_steps(n_examples: int, cfg: TrainConfig) -> int:
    return max(1, math.ceil(n_examples * cfg.epochs / cfg.batch_size))


def train(model: torch.nn.Module, examples: Sequence, loss_fn: Callable, cfg: TrainConfig,
          description: str = "train", progress: bool = True,
          on_log: Callable[[int, dict], bool | None] | None = None) -> list[dict]:
    """Optimise `loss_fn` over `examples`; returns the logged metrics (one dict per `log_every` steps).
    `on_log(step, row)` sees each logged row; returning True stops training after that step (a monitor's alarm)."""
    seed_everything(cfg.seed)
    steps = num_steps(len(examples), cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = max(1, int(cfg.warmup_frac * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    model.train()
    history, window, start = [], [], time.monotonic()
    with progress_bar(steps, description, progress) as bar:
        for step, batch in enumerate(batches(examples, cfg.batch_size, cfg.epochs, cfg.seed), 1):
            loss, metrics = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            sched.step()
            window.append({"loss": float(loss.detach()), **metrics})
            bar.advance()
            out_of_time = cfg.time_budget_s and time.monotonic() - start > cfg.time_budget_s
            stop = False
            if step % cfg.log_every == 0 or step == steps or out_of_time:
                row = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
                row.update(step=step, seconds=round(time.monotonic() - start, 2), lr=sched.get_last_lr()[0])
                history.append(row)
                window = []
                stop = bool(on_log and on_log(step, row))
            if out_of_time or stop:
                break
    model.eval()
    return history
