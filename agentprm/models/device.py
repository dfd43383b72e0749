"""Where models live and in what precision: the one `DeviceConfig` (the loop's `device:` section and the
`--device/--dtype/--threads` flags of every command that computes), resolved once per process by `use_device`,
applied by `place` at every point a model is built or loaded (models/presets.py, prm/model.py). Every loss and
scorer already moves its inputs to the model's device, so a model placed here runs there.

    auto device: CUDA when torch sees one, else CPU;  auto dtype: bfloat16 on a GPU that supports it, else float32

Nothing falls back silently: asking for CUDA without one, or bfloat16 on a GPU without it, is a one-line error.
torch is imported only when a placement is resolved, so configs and `--help` stay torch-free.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass

from agentprm.errors import UserError
from agentprm.ranges import check_section

DTYPES = ("auto", "float32", "bfloat16", "float16")
MIXED_PRECISION = ("no", "bf16")


@dataclass
class DeviceConfig:
    device: str = "auto"            # auto (CUDA when available, else CPU) | cpu | cuda | cuda:N
    dtype: str = "auto"             # auto (bfloat16 on a GPU that supports it, else float32) | float32 | bfloat16 |
                                    # float16: the models' parameter dtype
    threads: int = 0                # torch CPU threads (0 = torch's default)
    mixed_precision: str = "no"     # no | bf16: trainings compute in bfloat16 under torch.autocast while the weights and
                                    # the optimizer stay in float32 (dtype auto resolves to float32 with it)
    gradient_checkpointing: bool = False   # trainings recompute activations in the backward pass instead of keeping
                                    # them: less memory for about a third more compute (HF models)


def check_device_config(cfg: DeviceConfig, where: str = "device") -> None:
    """Field values a placement could never accept (before any work; the hardware is checked by `use_device`)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.device):
        raise UserError(f"{where}: field 'device' must be auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    if cfg.dtype not in DTYPES:
        raise UserError(f"{where}: field 'dtype' must be one of {', '.join(DTYPES)}, got {cfg.dtype!r}")
    if cfg.mixed_precision not in MIXED_PRECISION:
        raise UserError(f"{where}: field 'mixed_precision' must be no or bf16, got {cfg.mixed_precision!r}")
    if cfg.mixed_precision != "no" and cfg.dtype not in ("auto", "float32"):
        raise UserError(f"{where}: mixed_precision {cfg.mixed_precision} keeps the weights in float32; with dtype "
                        f"{cfg.dtype} use mixed_precision no (or dtype float32)")
    check_section(cfg, lambda path: f"{where}: field '{path}'")   # threads: agentprm/ranges.py


_placement: tuple | None = None    # (torch.device, torch.dtype) of this process, once resolved
_training: tuple[str, bool] = ("no", False)   # (mixed_precision, gradient_checkpointing) of this process's trainings
_threads_chosen = False   # the device config set torch's thread count: `sharing_cores` leaves it as it is


def use_device(cfg: DeviceConfig) -> tuple:
    """Resolve `cfg` against the hardware and make it this process's placement; returns (device, dtype)."""
    import torch

    global _placement
    check_device_config(cfg)
    if cfg.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"device {cfg.device}: torch sees no CUDA device (torch.cuda.is_available() is False)")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {cfg.device}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if cfg.mixed_precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(f"mixed_precision bf16: {torch.cuda.get_device_name(device)} does not support bfloat16")
    if cfg.dtype == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported() and cfg.mixed_precision == "no"
        dtype = torch.bfloat16 if bf16 else torch.float32
    else:
        dtype = getattr(torch, cfg.dtype)
        if dtype is torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise UserError(f"dtype bfloat16: {torch.cuda.get_device_name(device)} does not support it")
        if dtype is torch.float16 and device.type == "cpu":   # trained to "final loss nan" with exit 0
            raise UserError("dtype float16 on the CPU: its kernels and range there turn training into NaN; use "
                            "bfloat16 or float32")
    # Always set, even to torch's own default: a process whose count was never set computes its matmuls differently
    # from one where it was (3 AdamW steps of π0 give other weights: bench/thread_numerics.py), and the rollouts set
    # it (`sharing_cores`) — a run resumed without rollouts would train to other weights than the run it resumes.
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    global _training, _threads_chosen
    _threads_chosen = bool(cfg.threads)
    _placement, _training = (device, dtype), (cfg.mixed_precision, cfg.gradient_checkpointing)
    return _placement


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def sharing_cores(workers: int, lanes: int = 1):
    """While `workers` env processes run beside this process's model (rollouts, evaluation), torch computes on the
    cores they leave — split between `lanes` threads that each run the model at once (beam search), at least one
    each — and gets its thread count back after, unless the device config (`threads`, `--threads`) chose one. The
    engine steps one half of the episodes in the workers while the model thinks for the other half, so both run at
    once, and torch's default of a thread per core oversubscribes the machine. Measured on 2 cores, 2 workers,
    12,000 rollouts of π0 on 3,000 games (the same stage, only the thread count differing): torch's 2 threads
    69 → 57 rows/s, decaying through the hour; 1 thread 73 → 84 rows/s (docs/results.md). Beam search's 2 lanes on
    2 cores: 96 s with 2 threads each, 82 s with 1, the same episodes (bench/beam_workers.py). A process that never
    imported torch runs no model here, and nothing changes."""
    torch = sys.modules.get("torch")
    if torch is None or _threads_chosen or (workers < 1 and lanes <= 1):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(before, (_cores() - workers) // max(1, lanes))))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def training_options() -> tuple[str, bool]:
    """(mixed_precision, gradient_checkpointing) for the training core: ("no", False) until `use_device` says."""
    return _training


def place(model):
    """`model` on this process's device and dtype (float32 on the CPU until `use_device` says otherwise)."""
    if _placement is None:
        return model
    device, dtype = _placement
    return model.to(device=device, dtype=dtype)
