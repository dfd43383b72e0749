"""The prepared GPU check: a ~0.5 B-parameter Llama-architecture model with random weights and the bundled
tokenizer (nothing downloaded) through sft, generation, rollout → targets → train-prm, eval and one loop iteration,
all with --device/--dtype, printing throughput (tokens/s of SFT training and of sampling), model-FLOPs utilisation of
SFT against the GPU's dense bf16 peak, peak GPU memory and each step's seconds. Sized to finish in ≤ 8 minutes on an
H100/H200-class GPU.

    bash bench/gpu_check.sh                                       # on the GPU machine: --device cuda --dtype bfloat16
    python bench/gpu_check.py --size tiny --device cpu --dtype float32 --out /tmp/gpu-check   # the same steps on a CPU

`--model-only` skips everything that needs ALFWorld (tasks, demos, rollouts, the loop) and measures SFT and sampling
throughput on random 320-token sequences: for a machine that has torch and transformers but not alfworld's Fast
Downward build. Writes <out>/gpu_check.json (every figure, with the device's name). Numbers go into docs/results.md with the GPU's
name; the script is what makes a short GPU loan productive, so keep it runnable on the CPU too (tests do not run it).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SIZES = {   # LlamaConfig fields; parameters with the 355-token env vocabulary
    "0.5b": dict(hidden_size=1280, intermediate_size=3456, num_hidden_layers=24, num_attention_heads=20,
                 num_key_value_heads=20),           # ~0.47 B
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2),            # head_dim 32: vLLM's CPU attention has no kernel for 16
}
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}   # dense bf16 FLOP/s, vendor sheets


def peak_flops(name: str) -> float | None:
    return next((v for k, v in BF16_PEAK.items() if k in name), None)


class Timer:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[name] = round(time.perf_counter() - start, 2)
        print(f"  {name}: {self.seconds[name]:.1f} s", flush=True)
        return out


def build_model_folder(out: Path, size: str) -> tuple[Path, int]:
    """A policy folder of a `size` Llama with random weights (a registered preset, built on the placed device)."""
    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.tokenizer import build_tokenizer
    from agentprm.models import PRESETS, build_model, register_preset

    name = f"gpu-check-{size}"
    if name not in PRESETS:
        register_preset(name)(lambda: dict(SIZES[size]))
    tokenizer = build_tokenizer()
    model = build_model(name, tokenizer, seed=0)
    save_policy(model, tokenizer, out, PromptConfig())
    return out, sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--model-only", action="store_true", help="throughput on random sequences only (no ALFWorld)")
    args = ap.parse_args()
    import torch

    from agentprm.cli import main as cli
    from agentprm.envs.alfworld.generate import generate_tasks
    from agentprm.models.device import DeviceConfig, use_device

    out, t = args.out, Timer()
    out.mkdir(parents=True, exist_ok=True)
    device, dtype = use_device(DeviceConfig(device=args.device, dtype=args.dtype))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"gpu_check on {name}, {dtype}, model size {args.size}", flush=True)
    if args.model_only:
        return model_only(args, out, device, name)
    flags = ["--device", args.device, "--dtype", args.dtype]
    workers = str(min(8, os.cpu_count() or 1))
    t("tasks", lambda: [generate_tasks(out / s, s, n, 0, workers=int(workers), progress=False)
                        for s, n in (("train", 16), ("eval", 12)) if not (out / s).exists()])
    if not (out / "demos.parquet").exists():
        t("demos", cli, ["demos", "--tasks", str(out / "train"), "--out", str(out / "demos.parquet"),
                         "--workers", workers])
    folder, params = t("build model", build_model_folder, out / "init", args.size)

    # SFT: tokens/s and MFU (6 · params · tokens/s over the peak)
    from agentprm.agent.encoding import PromptConfig
    from agentprm.models import load_tokenizer
    from agentprm.policy.sft import SFTConfig, load_demos, make_examples

    examples = make_examples(load_tokenizer(folder), load_demos(out / "demos.parquet", SFTConfig()), PromptConfig())
    epochs = args.sft_steps * 16 / len(examples)
    assert cli(["sft", "--demos", str(out / "demos.parquet"), "--model", str(folder), "--out", str(out / "pi0"),
                "--epochs", f"{epochs:.4f}", "--batch-size", "16", "--lr", "3e-4", "--json", str(out / "sft.json"),
                *flags]) == 0
    sft = json.loads((out / "sft.json").read_text())
    tokens = sum(len(e.input_ids) for e in examples) * epochs
    train_tps = tokens / sft["train_seconds"]
    peak = peak_flops(name)
    mfu = 6 * params * train_tps / peak if peak else None
    t.seconds["sft"] = sft["train_seconds"]

    # sampling: free generation of 8 replies for 32 prompts
    from agentprm.agent.encoding import prompt_ids
    from agentprm.agent.lm import LMAgent
    from agentprm.agent.replay import episode_states

    agent = LMAgent.load(out / "pi0", mode="generate", temperature=1.0, max_new_tokens=32)
    states = [s for e in load_demos(out / "demos.parquet", SFTConfig())[:8] for s, _ in episode_states(e)][:32]
    prompts = [prompt_ids(agent.tokenizer, s, agent.prompt_cfg) for s in states]
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    rows = agent.backend.generate(prompts, 8, 1.0, 32, seed=0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    gen_s = time.perf_counter() - start
    gen_tps = sum(len(r) for row in rows for r in row) / gen_s

    # the pipeline's other commands and one loop iteration, placed the same way
    roll, q, prm = out / "rollouts", out / "q.parquet", out / "prm"
    if not roll.exists():
        t("rollout", cli, ["rollout", "--policy", str(out / "pi0"), "--tasks", str(out / "train"), "--per-task", "2",
                           "--max-steps", "10", "--out", str(roll), "--workers", workers, *flags])
    t("targets", cli, ["targets", "mc", "--rollouts", str(roll), "--out", str(q)])
    t("train-prm", cli, ["train-prm", "--targets", str(q), "--init", str(out / "pi0"), "--out", str(prm),
                         "--epochs", "1", *flags])
    t("eval", cli, ["eval", "--policy", str(out / "pi0"), "--tasks", str(out / "eval"), "--max-steps", "10",
                    "--workers", workers, *flags])
    import yaml

    cfg = {"iterations": 1, "tasks": {"train_dir": str(out / "train"), "eval_dir": str(out / "eval")},
           "policy0": {"path": str(out / "pi0")}, "device": {"device": args.device, "dtype": args.dtype},
           "rollout": {"per_task": 2, "max_steps": 10, "num_envs": 16, "workers": int(workers)},
           "prm": {"epochs": 1}, "policy": {"steps": 10, "batch_size": 8},
           "eval": {"max_steps": 10, "best_of_n": [4], "beam_width": 2, "beam_expand": 2}}
    (out / "loop.yaml").write_text(yaml.safe_dump(cfg))
    t("loop iteration", cli, ["loop", "--config", str(out / "loop.yaml"), "--run-dir", str(out / "loop"),
                              *(["--resume"] if (out / "loop").exists() else [])])
    memory = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None
    figures = {"device": name, "dtype": str(dtype), "params": params, "sft_tokens_per_s": round(train_tps),
               "sft_mfu": round(mfu, 4) if mfu else None, "bf16_peak_flops": peak,
               "generate_tokens_per_s": round(gen_tps), "max_memory_gib": round(memory, 2) if memory else None,
               "seconds": t.seconds}
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


def model_only(args, out: Path, device, name: str) -> None:
    """SFT steps and sampling on random token sequences: the GPU figures without ALFWorld."""
    import torch

    from agentprm.agent.lm import LMAgent
    from agentprm.policy.sft import Example, sft_loss
    from agentprm.train.config import TrainConfig
    from agentprm.train.core import train

    folder, params = build_model_folder(out / "init", args.size)
    agent = LMAgent.load(folder, mode="generate", temperature=1.0, max_new_tokens=32)
    vocab, g = len(agent.tokenizer), torch.Generator().manual_seed(0)
    seqs = [torch.randint(10, vocab, (320,), generator=g).tolist() for _ in range(16 * args.sft_steps)]
    examples = [Example(s, s) for s in seqs]
    start = time.perf_counter()
    train(agent.backend.model, examples, sft_loss, TrainConfig(lr=3e-4, epochs=1, batch_size=16), progress=False)
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_tps = 320 * len(examples) / (time.perf_counter() - start)
    start = time.perf_counter()
    rows = agent.backend.generate([s[:256] for s in seqs[:32]], 8, 1.0, 32, seed=0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    gen_tps = sum(len(r) for row in rows for r in row) / (time.perf_counter() - start)
    peak = peak_flops(name)
    figures = {"device": name, "params": params, "mode": "model-only", "sft_tokens_per_s": round(train_tps),
               "sft_mfu": round(6 * params * train_tps / peak, 4) if peak else None, "bf16_peak_flops": peak,
               "generate_tokens_per_s": round(gen_tps),
               "max_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
               if device.type == "cuda" else None}
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
