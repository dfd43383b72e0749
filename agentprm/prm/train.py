"""Stage-2 training: fit a `ProcessRewardModel` to Q-targets with a registered loss through the shared training core.

    metrics = train_prm("q.parquet", "runs/sft", "soft-bce", "runs/prm", TrainConfig(epochs=2))

States are rebuilt from the rollouts recorded in the targets file (each target's (episode_id, turn) reference) and
checked against the target's state key. Tasks, not rows, are split into train and held-out, so no game's states
leak across the split. Metrics (see `agentprm.prm.metrics`) are reported before and after training, on both halves.

A state's prompt is tokenised once, and the replies that share a state share one packed row in the forward
(`ProcessRewardModel.logits_packed`): a pair's two replies, a listwise state's candidates, and a state's rows when
evaluating — the prompt, ~230 of a row's ~235 tokens in ALFWorld, is run once instead of once per reply
(bench/prm_throughput.py).
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.state import AgentState
from agentprm.data.tables import read_targets
from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.tracking import active
from agentprm.prm.losses import PrmLoss, get_prm_loss
from agentprm.prm.metrics import bce, pairwise_accuracy, spearman
from agentprm.prm.model import ProcessRewardModel, group_indices
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


def whole_tasks(rows: np.ndarray, tasks: Sequence[str], limit: int | None, seed: int) -> np.ndarray:
    """`rows` (sorted), or those of a seeded order of their tasks, task by task while they fit in `limit` rows (at
    least one task): a bounded sample that keeps every state's alternatives together."""
    if limit is None or len(rows) <= limit:
        return rows
    order = sorted({tasks[i] for i in rows})
    random.Random(seed).shuffle(order)
    by_task: dict[str, list[int]] = {}
    for i in rows:
        by_task.setdefault(tasks[i], []).append(int(i))
    kept: list[int] = []
    for task in order:
        if kept and len(kept) + len(by_task[task]) > limit:
            continue
        kept += by_task[task]
    return np.array(sorted(kept), dtype=rows.dtype)


def evaluate(prm: ProcessRewardModel, prompts: Sequence[Sequence[int]], replies: Sequence[Sequence[int]],
             q: Sequence[float], state_keys: Sequence[str], delta: float, batch_size: int,
             offsets: torch.Tensor | None = None) -> dict[str, Any]:
    """Metrics of Q_φ against the targets; rows of one state are scored in one packed row (`score_packed`)."""
    rows = group_indices(state_keys)
    logits = torch.zeros(len(q))
    for members, found in zip(rows, prm.score_packed([prompts[m[0]] for m in rows],
                                                     [[replies[i] for i in m] for m in rows], batch_size)):
        logits[members] = found
    pred = torch.sigmoid(logits if offsets is None else logits + offsets).tolist()
    accuracy, n_pairs = pairwise_accuracy(pred, q, state_keys, delta)
    return {"n": len(q), "bce": bce(pred, q), "spearman": spearman(pred, q), "pairwise_accuracy": accuracy,
            "pairs": n_pairs}


def make_loss_fn(loss: PrmLoss, delta: float = 0.0) -> Callable:
    """loss_fn(model, batch) for the training core. A batch holds (seq, q, offset) points, (prompt, chosen, rejected,
    offset_chosen, offset_rejected) pairs or (prompt, replies, qs, offsets) states; an offset (the prior's
    w · log π_ref, else 0) is added to the row's logit. A pair's or a state's replies share one packed row."""
    if loss.kind == "trajectory":
        return PQMLoss(fn=loss.fn)
    if loss.pairwise:
        def pairwise(model: ProcessRewardModel, batch: list) -> tuple[torch.Tensor, dict[str, float]]:
            logits = torch.stack(model.logits_packed([e[0] for e in batch], [(e[1], e[2]) for e in batch]))
            logits = logits + torch.tensor([(e[3], e[4]) for e in batch], dtype=logits.dtype, device=logits.device)
            chosen, rejected = logits[:, 0], logits[:, 1]
            return loss.fn(chosen, rejected), {"pair_acc": float((chosen > rejected).float().mean())}
        return pairwise
    if loss.kind == "listwise":
        def listwise(model: ProcessRewardModel, batch: list) -> tuple[torch.Tensor, dict[str, float]]:
            terms, right, pairs = [], 0, 0
            for (_, _, qs, offs), logits in zip(batch, model.logits_packed([e[0] for e in batch],
                                                                            [e[1] for e in batch])):
                logits, qs = logits + _column(logits, list(offs)), _column(logits, list(qs))
                terms.append(loss.fn(logits, qs, delta))
                beats = qs[None, :] > qs[:, None] + delta   # [j, i]: i beats j
                right += int((beats & (logits[None, :] > logits[:, None])).sum())
                pairs += int(beats.sum())
            return torch.cat(terms).mean(), {"pair_acc": right / max(1, pairs)}
        return listwise

    def pointwise(model: ProcessRewardModel, batch: list) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model.logits_of([s for s, *_ in batch])
        logits = logits + _column(logits, [e[2] for e in batch])
        return loss.fn(logits, _column(logits, [e[1] for e in batch])), {}
    return pointwise


def _column(like: torch.Tensor, values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device)


LENGTHS: dict[str, Callable[[Any], int]] = {   # an example's tokens, for length-bucketed batches
    "pointwise": lambda e: len(e[0]),
    "pairwise": lambda e: len(e[0]) + len(e[1]),     # prompt ⊕ chosen: the length the pairs were bucketed by before
                                                     # they were packed (the same batches as then)
    "listwise": lambda e: len(e[0]) + sum(map(len, e[1])),
    "trajectory": lambda e: sum(map(len, e.seqs)),
}


def train_prm(targets_path: str | Path, init: str | Path, loss: str, out_dir: str | Path,
              cfg: TrainConfig | None = None, data: PrmDataConfig | None = None,
              progress: bool = False, lora: LoraConfig | None = None, prior_weight: float = 0.0,
              inputs: dict[str, Any] | None = None, prior_policy: str | Path | None = None,
              eval_rows: int | None = None) -> dict[str, Any]:
    """Train, evaluate, save the PRM to `out_dir` atomically; returns the metrics (also stored in agentprm.json).
    With `lora` (r > 0) only adapters on `init`'s backbone and the scalar head are trained (models/lora.py). With
    `prior_weight` w > 0 the PRM's logit is f_φ + w · log π_init(a | s), π_init frozen (prm/model.py): the head fits
    a residual on the policy's own ranking. `inputs` (PromptConfig fields, `PrmConfig.inputs()`) changes what the PRM
    reads of a state — more history, the admissible commands — from its init's prompt; the prior keeps its own.
    `prior_policy`: the policy folder whose log π is the prior, where it is not `init` (a PRM initialised from
    another model with the same tokenizer). `eval_rows`: the metrics of each half, before and after training, on at
    most this many rows (whole tasks, `evaluated_rows`), not all of them."""
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
        raise UserError(f"prior_weight {prior_weight}: loss {loss!r} scores whole episodes; a prior needs a "
                        "pointwise, pairwise or listwise loss")
    states = load_states(targets, data.rollouts)
    prm = ProcessRewardModel.init(init, seed=cfg.seed)
    if inputs:
        prm.prompt = replace(prm.prompt, **inputs)
    if prior_weight:
        prm.attach_prior(prior_policy or init, prior_weight)
    if lora and lora.r:
        prm.add_lora(lora, seed=cfg.seed)

    prompts: dict[str, list[int]] = {}
    by_key: dict[str, AgentState] = {}
    for state in states:
        if state.key() not in prompts:
            prompts[state.key()] = prompt_ids(prm.tokenizer, state, prm.prompt)
            by_key[state.key()] = state
    actions, q = targets.table["action"].to_pylist(), targets.table["q"].to_pylist()
    keys, tasks = targets.table["state_key"].to_pylist(), targets.table["task_id"].to_pylist()
    replies = [reply_ids(prm.tokenizer, a) for a in actions]

    held = split_by_task(tasks, data.heldout_frac, cfg.seed)
    halves = {name: np.flatnonzero(mask) for name, mask in (("train", ~held), ("heldout", held))}
    train_rows = halves["train"]
    scored = {name: whole_tasks(rows, tasks, eval_rows, cfg.seed) for name, rows in halves.items()}
    if prm_loss.pairwise:
        pairs = [(int(train_rows[a]), int(train_rows[b]))
                 for a, b in pair_indices([keys[i] for i in train_rows], [q[i] for i in train_rows], data.delta)]
        used = {i for pair in pairs for i in pair}
    elif prm_loss.kind == "listwise":   # every train state with two replies the targets tell apart
        groups = [m for m in ([int(train_rows[j]) for j in m] for m in group_indices([keys[i] for i in train_rows]))
                  if max(q[i] for i in m) - min(q[i] for i in m) > data.delta]
        used = {i for m in groups for i in m}
    else:
        used = set(train_rows.tolist())
    # the prior's log π0 only of the rows trained on or scored: same-state pairs are a few % of MC targets' rows
    need = sorted(used.union(*(rows.tolist() for rows in scored.values())))
    offsets = torch.zeros(len(keys))
    offsets[need] = prm.prior_offsets([by_key[keys[i]] for i in need], [prompts[keys[i]] for i in need],
                                      [replies[i] for i in need], data.eval_batch_size)   # zeros without a prior
    off = offsets.tolist()

    if prm_loss.kind == "trajectory":   # whole episodes of the train tasks, steps labelled by their Q̂
        train_tasks = {tasks[i] for i in train_rows}
        q_of = {(keys[i], actions[i]): q[i] for i in range(len(q))}
        episodes = [e for e in iter_episodes(read_trajectories(data.rollouts or targets.info["rollouts"]))
                    if e.task_id in train_tasks]
        examples = pqm_trajectories(episodes, q_of, prm.tokenizer, prm.prompt)
    elif prm_loss.pairwise:
        examples = [(prompts[keys[i]], replies[i], replies[j], off[i], off[j]) for i, j in pairs]
    elif prm_loss.kind == "listwise":
        examples = [(prompts[keys[m[0]]], tuple(replies[i] for i in m), tuple(q[i] for i in m),
                     tuple(off[i] for i in m)) for m in groups]
    else:
        examples = [(prompts[keys[i]] + replies[i], q[i], off[i]) for i in train_rows]
    if not examples and prm_loss.kind == "trajectory":
        raise UserError(f"{targets_path}: no episode of the train tasks has every step in these targets (loss "
                        f"{loss!r} needs MC targets of the rollouts' episodes)")
    if not examples:  # only pairs can be missing: the split never holds out every task
        raise UserError(f"{targets_path}: no {'states' if prm_loss.kind == 'listwise' else 'pairs'} for loss "
                        f"{loss!r}: no two actions at a training state have "
                        f"Q-targets more than delta={data.delta} apart")

    def evaluate_all() -> dict[str, Any]:
        return {name: evaluate(prm, [prompts[keys[i]] for i in rows], [replies[i] for i in rows], [q[i] for i in rows],
                               [keys[i] for i in rows], data.delta, data.eval_batch_size,
                               offsets[torch.as_tensor(rows)]) for name, rows in scored.items() if len(rows)}

    initial = evaluate_all()
    history = train(prm, examples, make_loss_fn(prm_loss, data.delta), cfg, description=f"PRM {loss}",
                    progress=progress, length=LENGTHS[prm_loss.kind])
    metrics = {"loss": loss, "init": str(init), "targets": str(targets_path), "rollouts": data.rollouts or
               targets.info.get("rollouts"), "gamma": targets.info.get("gamma"), "examples": len(examples),
               "tasks": {name: len({tasks[i] for i in rows}) for name, rows in halves.items()}, "prior_weight": prior_weight,
               "initial": initial, "final": evaluate_all(), "history": history,
               "evaluated_rows": {name: len(rows) for name, rows in scored.items()},
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

