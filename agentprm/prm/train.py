"""Stage-2 training: fit a `ProcessRewardModel` to Q-targets with a registered loss through the shared training core.

    metrics = train_prm("q.parquet", "runs/sft", "soft-bce", "runs/prm", TrainConfig(epochs=2))

States are rebuilt from the rollouts recorded in the targets file (each target's (episode_id, turn) reference) and
checked against the target's state key. Tasks, not rows, are split into train and held-out, so no game's states
leak across the split. Metrics (see `agentprm.prm.metrics`) are reported before and after training, on both halves.
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.data.tables import read_targets
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.tracking import active
from agentprm.prm.losses import PrmLoss, get_prm_loss
from agentprm.prm.metrics import bce, pairwise_accuracy, spearman
from agentprm.prm.model import ProcessRewardModel
from agentprm.prm.pqm import PQMLoss, pqm_trajectories
from agentprm.targets.mc import load_states
from agentprm.targets.pairs import pair_indices
from agentprm.prm.config import PrmDataConfig
from agentprm.train.config import LoraConfig, TrainConfig, check_lora
from agentprm.train.core import train


def split_by_task(task_ids: Sequence[str], heldout_frac: float, seed: int) -> np.ndarray:
    """Boolean mask of held-out rows: a seeded share of the distinct tasks (at least one when there are two or
    more tasks and heldout_frac > 0; never all of them)."""
    tasks = sorted(set(task_ids))
    random.Random(seed).shuffle(tasks)
    n_held = round(heldout_frac * len(tasks))
    if heldout_frac > 0 and len(tasks) >= 2:
        n_held = min(max(n_held, 1), len(tasks) - 1)
    held = set(tasks[:n_held])
    return np.array([t in held for t in task_ids], dtype=bool)


def evaluate(prm: ProcessRewardModel, seqs: Sequence[Sequence[int]], q: Sequence[float], state_keys: Sequence[str],
             delta: float, batch_size: int, offsets: torch.Tensor | None = None) -> dict[str, Any]:
    pred = prm.score_ids(seqs, batch_size, offsets).tolist()
    accuracy, n_pairs = pairwise_accuracy(pred, q, state_keys, delta)
    return {"n": len(q), "bce": bce(pred, q), "spearman": spearman(pred, q), "pairwise_accuracy": accuracy,
            "pairs": n_pairs}


def make_loss_fn(loss: PrmLoss) -> Callable:
    """loss_fn(model, batch) for the training core. A batch holds (seq, q, offset) points or (chosen, rejected,
    offset_chosen, offset_rejected) pairs; an offset (the prior's w · log π_ref, else 0) is added to the row's logit."""
    if loss.kind == "trajectory":
        return PQMLoss(fn=loss.fn)
    if loss.pairwise:
        def pairwise(model: ProcessRewardModel, batch: list) -> tuple[torch.Tensor, dict[str, float]]:
            logits = model.logits_of([c for c, *_ in batch] + [r for _, r, *_ in batch])
            logits = logits + _column(logits, [e[2] for e in batch] + [e[3] for e in batch])
            chosen, rejected = logits[:len(batch)], logits[len(batch):]
            return loss.fn(chosen, rejected), {"pair_acc": float((chosen > rejected).float().mean())}
        return pairwise

    def pointwise(model: ProcessRewardModel, batch: list) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model.logits_of([s for s, *_ in batch])
        logits = logits + _column(logits, [e[2] for e in batch])
        return loss.fn(logits, _column(logits, [e[1] for e in batch])), {}
    return pointwise


def _column(like: torch.Tensor, values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device)


def train_prm(targets_path: str | Path, init: str | Path, loss: str, out_dir: str | Path,
              cfg: TrainConfig | None = None, data: PrmDataConfig | None = None,
              progress: bool = False, lora: LoraConfig | None = None, prior_weight: float = 0.0) -> dict[str, Any]:
    """Train, evaluate, save the PRM to `out_dir` atomically; returns the metrics (also stored in agentprm.json).
    With `lora` (r > 0) only adapters on `init`'s backbone and the scalar head are trained (models/lora.py). With
    `prior_weight` w > 0 the PRM's logit is f_φ + w · log π_init(a | s), π_init frozen (prm/model.py): the head fits
    a residual on the policy's own ranking."""
    cfg, data, start = cfg or TrainConfig(), data or PrmDataConfig(), time.monotonic()
    prm_loss = get_prm_loss(loss)
    if not 0.0 <= data.heldout_frac < 1.0:
        raise UserError(f"--heldout-frac {data.heldout_frac}: must be in [0, 1)")
    targets = read_targets(targets_path)
    if targets.table.num_rows == 0:
        raise UserError(f"{targets_path}: no targets")
    if lora and lora.r:
        check_lora(lora)
        if not Path(init).is_dir():
            raise UserError(f"lora: --init {init} is a preset trained from scratch, there is nothing to adapt (give "
                            "a model folder, or train every weight with --lora-r 0)")
    if prior_weight and prm_loss.kind == "trajectory":
        raise UserError(f"prior_weight {prior_weight}: loss {loss!r} scores whole episodes; a prior needs a pointwise "
                        "or pairwise loss")
    states = load_states(targets, data.rollouts)
    prm = ProcessRewardModel.init(init, seed=cfg.seed)
    if prior_weight:
        prm.attach_prior(init, prior_weight)
    if lora and lora.r:
        prm.add_lora(lora, seed=cfg.seed)

    prompts: dict[str, list[int]] = {}
    for state in states:
        if state.key() not in prompts:
            prompts[state.key()] = prompt_ids(prm.tokenizer, state, prm.prompt)
    actions, q = targets.table["action"].to_pylist(), targets.table["q"].to_pylist()
    keys, tasks = targets.table["state_key"].to_pylist(), targets.table["task_id"].to_pylist()
    replies = [reply_ids(prm.tokenizer, a) for a in actions]
    seqs = [prompts[k] + r for k, r in zip(keys, replies)]
    offsets = prm.prior_offsets([prompts[k] for k in keys], replies, data.eval_batch_size)   # zeros without a prior
    off = offsets.tolist()

    held = split_by_task(tasks, data.heldout_frac, cfg.seed)
    halves = {name: np.flatnonzero(mask) for name, mask in (("train", ~held), ("heldout", held))}
    train_rows = halves["train"]
    if prm_loss.kind == "trajectory":   # whole episodes of the train tasks, steps labelled by their Q̂
        train_tasks = {tasks[i] for i in train_rows}
        q_of = {(keys[i], actions[i]): q[i] for i in range(len(q))}
        episodes = [e for e in iter_episodes(read_trajectories(data.rollouts or targets.info["rollouts"]))
                    if e.task_id in train_tasks]
        examples = pqm_trajectories(episodes, q_of, prm.tokenizer, prm.prompt)
    elif prm_loss.pairwise:
        pairs = pair_indices([keys[i] for i in train_rows], [q[i] for i in train_rows], data.delta)
        examples = [(seqs[train_rows[i]], seqs[train_rows[j]], off[train_rows[i]], off[train_rows[j]]) for i, j in pairs]
    else:
        examples = [(seqs[i], q[i], off[i]) for i in train_rows]
    if not examples and prm_loss.kind == "trajectory":
        raise UserError(f"{targets_path}: no episode of the train tasks has every step in these targets (loss "
                        f"{loss!r} needs MC targets of the rollouts' episodes)")
    if not examples:  # only pairs can be missing: the split never holds out every task
        raise UserError(f"{targets_path}: no pairs for loss {loss!r}: no two actions at a training state have "
                        f"Q-targets more than delta={data.delta} apart")

    def evaluate_all() -> dict[str, Any]:
        return {name: evaluate(prm, [seqs[i] for i in rows], [q[i] for i in rows], [keys[i] for i in rows],
                               data.delta, data.eval_batch_size, offsets[torch.as_tensor(rows)]) for name, rows in halves.items()
                if len(rows)}

    initial = evaluate_all()
    # length for batching: pairs — the chosen row (same state as the rejected one); trajectories — their tokens
    length = (lambda e: sum(map(len, e.seqs))) if prm_loss.kind == "trajectory" else (lambda e: len(e[0]))
    history = train(prm, examples, make_loss_fn(prm_loss), cfg, description=f"PRM {loss}", progress=progress,
                    length=length)
    metrics = {"loss": loss, "init": str(init), "targets": str(targets_path), "rollouts": data.rollouts or
               targets.info.get("rollouts"), "gamma": targets.info.get("gamma"), "examples": len(examples),
               "tasks": {name: len({tasks[i] for i in rows}) for name, rows in halves.items()}, "prior_weight": prior_weight,
               "initial": initial, "final": evaluate_all(), "history": history,
               "train_config": cfg.to_dict(), "data_config": asdict(data)}
    if lora and lora.r:
        from agentprm.models.lora import trainable

        metrics["lora"] = {**lora.to_dict(), **trainable(prm)}
    if tracker := active():
        tracker.log({f"{half}/{k}": v for half, found in metrics["final"].items() for k, v in found.items()},
                    history[-1]["step"] if history else 0, scope=tracker.scope or f"PRM {loss}")
    metrics["seconds"] = round(time.monotonic() - start, 2)
    prm.save(out_dir, merge=bool(lora and lora.merge), loss=loss, targets=str(Path(targets_path).resolve()),
             gamma=targets.info.get("gamma"), metrics=metrics["final"],
             history=[{"step": h["step"], "loss": h["loss"]} for h in history])
    return metrics

