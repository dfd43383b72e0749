"""Data-parallel training for the one training core, under `accelerate launch` (or torchrun) — CPU (gloo) or GPUs:

    accelerate launch --num_processes 2 $(which agentprm) sft --demos d.parquet --model DIR --out pi0

Every process runs the whole command on the same seeded data order; the training core (train/core.py) gives process
k the examples k, k + P, k + 2P, … of each global batch, and before each optimiser step the gradients are summed over
processes and divided by the global batch's weight (its examples, or what the loss reports as "weight", e.g. SFT's
labelled tokens). That is the gradient of the global batch's mean loss, so P processes follow the loss curve of one
process at the same global batch (tests/test_distributed.py). No wrapper is put around the model, so every loss
keeps calling its model's own methods. Only the main process writes checkpoints and summaries (`is_main`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from agentprm.outputs import launch_env

if TYPE_CHECKING:   # is_main is asked by model-free commands too: they import neither torch nor transformers
    import torch


def world_size() -> int:
    return launch_env()[1]


def is_main() -> bool:
    """The process that writes (rank 0; the only one outside a distributed launch)."""
    return launch_env()[0] == 0


def rank_and_size() -> tuple[int, int]:
    """This process's rank and the number of processes, joining the launcher's process group on first use
    (accelerate's PartialState: gloo on CPU, NCCL on GPUs)."""
    size = world_size()
    if size == 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        from accelerate import PartialState

        PartialState()
    return dist.get_rank(), dist.get_world_size()


def sum_over_processes(*tensors: torch.Tensor) -> None:
    """In place: each tensor becomes its sum over the processes (nothing to do in one process)."""
    if world_size() == 1:
        return
    import torch.distributed as dist

    for t in tensors:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
