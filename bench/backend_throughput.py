"""Rollout throughput with π in-process (HFBackend) vs behind a vLLM server (OpenAIBackend), side by side.

    python bench/backend_throughput.py [--policy DIR] [--games DIR] [--num-envs 16] [--max-steps 20]
                                       [--workers 2] [--mode choose|generate] [--repeats 3] [--json PATH]
                                       [--device cpu|cuda] [--dtype float32|bfloat16]

Both sides play the same episodes (the first --num-envs games of --games, or that many generated eval games) with
the same policy (default: the bundled π0), greedy, on one warm env pool; the server (agent/serving.py, started once,
untimed) runs on the same machine. Greedy play must take identical actions on both sides (checked; exit 1 if not).
The sides alternate --repeats times; it prints each side's median env-steps/s end to end and the ratio
(openai / hf) of every repeat. On a CPU the server and the env workers share the cores, so this measures the
protocol's overhead more than vLLM's speed; on a GPU it is the rollout speed-up (the target: generation
within 2x of `vllm bench throughput`).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import agentprm
from agentprm.agent.lm import LMAgent
from agentprm.agent.remote import BackendConfig
from agentprm.agent.serving import VLLMServer
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.pool import EnvPool
from agentprm.io import provenance, write_json
from agentprm.rollout.engine import episode_jobs, run_episodes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", default=str(Path(agentprm.__file__).parent / "assets" / "policy"))
    p.add_argument("--games", metavar="DIR", help="task folder (default: generate --num-envs eval games)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mode", choices=("choose", "generate"), default="choose")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="where both sides run π: the in-process model and the server")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    import torch

    from agentprm.models.device import DeviceConfig, use_device

    torch.set_num_threads(1)   # the env workers and the server share the cores
    use_device(DeviceConfig(device=args.device, dtype=args.dtype))
    gpu = args.device.startswith("cuda")
    with tempfile.TemporaryDirectory() as scratch:
        if args.games:
            tasks = load_tasks(args.games)[:args.num_envs]
        else:
            from agentprm.envs.alfworld.generate import generate_tasks

            tasks = generate_tasks(Path(scratch) / "games", "eval", args.num_envs, args.seed, progress=False)
        jobs = episode_jobs(tasks, 1, args.seed, args.max_steps, "bench")
        with VLLMServer(args.policy, log=Path(scratch) / "serve.log", device="cuda" if gpu else "cpu",
                        dtype="auto" if gpu else args.dtype) as server, \
                EnvPool(args.workers, num_slots=args.num_envs) as pool:
            agents = {"hf": LMAgent.load(args.policy, mode=args.mode),
                      "openai": LMAgent.load(args.policy, mode=args.mode,
                                             backend=BackendConfig(backend="openai", base_url=server.url))}
            run_episodes(jobs, agents["hf"], pool=pool, progress=False)   # warm-up: workers, caches, the server
            run_episodes(jobs, agents["openai"], pool=pool, progress=False)
            runs: dict[str, list[float]] = {"hf": [], "openai": []}
            actions = {}
            for _ in range(args.repeats):
                for side, agent in agents.items():
                    start = time.perf_counter()
                    episodes = run_episodes(jobs, agent, pool=pool, progress=False)
                    runs[side].append(sum(len(e.steps) for e in episodes) / (time.perf_counter() - start))
                    actions[side] = [[s.action for s in e.steps] for e in episodes]
    same = actions["hf"] == actions["openai"]
    ratios = [o / h for o, h in zip(runs["openai"], runs["hf"])]
    result = {side: {"steps_per_s_median": round(statistics.median_low(v), 2), "runs": [round(x, 2) for x in v]}
              for side, v in runs.items()}
    result.update(ratio_per_repeat=[round(r, 3) for r in ratios], same_actions=same, mode=args.mode,
                  num_envs=args.num_envs, workers=args.workers, max_steps=args.max_steps)
    print(f"in-process {result['hf']['steps_per_s_median']} env-steps/s, vLLM server "
          f"{result['openai']['steps_per_s_median']} env-steps/s; ratio per repeat {result['ratio_per_repeat']}; "
          f"same actions: {same}")
    if args.json:
        write_json(args.json, {**result, "provenance": provenance(vars(args), args.seed)})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
