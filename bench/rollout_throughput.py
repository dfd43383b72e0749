"""Rollout throughput of an LM policy: all envs batched into one `act()` call per turn vs one env per call.

    python bench/rollout_throughput.py [--games DIR] [--num-envs 16] [--max-steps 20] [--workers 2]
                                       [--mode generate|choose] [--max-new-tokens 32] [--model tiny]
                                       [--threads 1] [--repeats 3] [--device cpu]

Both sides play the same episodes (the first --num-envs games of --games, or that many generated eval games)
with the same untrained model (--model preset), greedy, on one env pool (--num-envs slots, --workers processes)
and the same engine; the only difference is that the one-at-a-time side hands the model one state per call. The
pool is warmed up first (untimed), so neither side pays worker start-up: the numbers are steady-state throughput.
Greedy choices do not depend on the batch, so both sides must take identical actions (checked; exit 1 if not).
The sides alternate --repeats times (so drift in the machine's load hits both alike); it prints each side's
median env-steps/s, end to end and counting only the time spent in `act`, and their ratio (target >= 5x end to
end), with the ratio of every repeat.

Default: free generation of --max-new-tokens 32 tokens per reply, the length of the paper's "REASON: ... ACTION:
..." replies (an untrained model never emits EOS, so every reply is exactly that long). `--mode choose` measures
our tiny agent's default decoding, scoring the admissible commands; see docs/results.md for both.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from agentprm.agent.encoding import PromptConfig, prompt_ids
from agentprm.agent.lm import LMAgent
from agentprm.agent.policies import RandomAgent
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.envs.alfworld.tasks import TaskSpec, load_tasks
from agentprm.envs.pool import EnvPool
from agentprm.io import provenance, write_json
from agentprm.models import build_model
from agentprm.rollout.engine import episode_jobs, run_episodes

TARGET_RATIO = 5.0


class Timed:
    """Wraps an agent: counts the seconds spent in `act`; `one_at_a_time` calls the agent once per state."""

    def __init__(self, agent: LMAgent, one_at_a_time: bool):
        self.agent, self.one_at_a_time, self.seconds = agent, one_at_a_time, 0.0
        self.name, self.needs_expert = agent.name, agent.needs_expert
        self.states: list = []

    def act(self, states: Sequence, turns: Sequence) -> list[str]:
        self.states += states
        start = time.perf_counter()
        if self.one_at_a_time:
            replies = [self.agent.act([s], [t])[0] for s, t in zip(states, turns)]
        else:
            replies = self.agent.act(states, turns)
        self.seconds += time.perf_counter() - start
        return replies


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--games", metavar="DIR", help="task folder (default: generate --num-envs eval games)")
    p.add_argument("--num-envs", type=int, default=16, help="envs played at once = episodes (default 16)")
    p.add_argument("--max-steps", type=int, default=20, help="steps per episode (default 20)")
    p.add_argument("--workers", type=int, default=2, help="env worker processes (default 2)")
    p.add_argument("--mode", choices=("choose", "generate"), default="generate", help="decoding mode (default generate)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="reply length in generate mode (default 32)")
    p.add_argument("--model", default="tiny", help="preset of the untrained model both sides use (default tiny)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, both sides (default 1: the env workers "
                   "share the cores)")
    p.add_argument("--device", default="cpu", help="torch device of the model, both sides (default cpu; e.g. cuda)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side, alternating (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write the numbers here")
    return p.parse_args(argv)


def bench_tasks(args: argparse.Namespace, scratch: Path) -> list[TaskSpec]:
    if args.games:
        return load_tasks(args.games)[:args.num_envs]
    from agentprm.envs.alfworld.generate import generate_tasks

    return generate_tasks(scratch / "games", "eval", args.num_envs, args.seed, progress=False)


def run_side(tasks: list[TaskSpec], model, tok, args: argparse.Namespace, one_at_a_time: bool,
             pool: EnvPool) -> tuple[dict, list]:
    agent = Timed(LMAgent(model, tok, PromptConfig(), mode=args.mode, max_new_tokens=args.max_new_tokens),
                  one_at_a_time)
    start = time.perf_counter()
    episodes = run_episodes(episode_jobs(tasks, 1, args.seed, args.max_steps, "bench"), agent, pool=pool,
                            progress=False)
    seconds = time.perf_counter() - start
    steps = sum(len(e.steps) for e in episodes)
    prompt_tokens = sum(len(prompt_ids(tok, s, agent.agent.prompt_cfg)) for s in agent.states) / len(agent.states)
    side = {"steps": steps, "seconds": round(seconds, 2), "act_seconds": round(agent.seconds, 2),
            "mean_prompt_tokens": round(prompt_tokens, 1),
            "steps_per_s": round(steps / seconds, 2), "act_steps_per_s": round(steps / agent.seconds, 2)}
    return side, [[s.action for s in e.steps] for e in episodes]


def median_run(sides: list[dict]) -> dict:
    """Each number the median over the runs of one side (the lower middle one for an even count)."""
    return {k: statistics.median_low(s[k] for s in sides) for k in sides[0]}


@torch.no_grad()
def forward_costs(model, pad_id: int, prompt_len: int, batch: int, new_tokens: int, seed: int) -> dict:
    """Where a reply's time goes, at batch 1 and at `batch`: the prompt's forward (prefill) and each cached decode
    step, on random prompts of the bench's mean prompt length. Prefill costs per token whatever the batch once the
    matmuls are big enough, so batching can only amortise decoding: with decoding free, the ratio is at most
    (prefill_1 + T·decode_1) / (prefill_B / B)."""
    from agentprm.agent.lm import HFBackend

    backend, gen = HFBackend(model, pad_id, pad_id), torch.Generator().manual_seed(seed)
    costs = {}
    for b in (1, batch):
        prompts = torch.randint(4, model.config.vocab_size, (b, prompt_len), generator=gen).tolist()
        backend.generate(prompts, 1, 0.0, 2, seed)   # warm-up
        times = {}
        for steps in (1, new_tokens):
            start = time.perf_counter()
            backend.generate(prompts, 1, 0.0, steps, seed)
            times[steps] = time.perf_counter() - start
        costs[b] = {"prefill_ms": 1000 * times[1], "decode_ms": 1000 * (times[new_tokens] - times[1]) / (new_tokens - 1)}
    one, many = costs[1], costs[batch]
    per_reply = lambda c, b: (c["prefill_ms"] + new_tokens * c["decode_ms"]) / b  # noqa: E731
    return {"batch_1": one, f"batch_{batch}": many, "prompt_tokens": prompt_len,
            "predicted_ratio": per_reply(one, 1) / per_reply(many, batch),
            "ratio_bound_free_decoding": per_reply(one, 1) / (many["prefill_ms"] / batch)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if min(args.threads, args.num_envs, args.repeats) < 1:
        raise SystemExit(f"--threads, --num-envs and --repeats must be at least 1 "
                         f"(got {args.threads}, {args.num_envs}, {args.repeats})")
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        raise SystemExit(f"--device {args.device!r}: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device!r}: this torch build sees no CUDA device")
    torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    model = build_model(args.model, tok, seed=args.seed).eval().to(device)
    with tempfile.TemporaryDirectory() as scratch, EnvPool(args.workers, num_slots=args.num_envs) as pool:
        tasks = bench_tasks(args, Path(scratch))
        # untimed warm-up on the same pool: worker start-up and the per-process caches are paid once, by neither side
        run_episodes(episode_jobs(tasks, 1, args.seed, 1, "warmup"), RandomAgent(args.seed), pool=pool,
                     progress=False)
        runs: dict[bool, list[dict]] = {True: [], False: []}
        actions = []
        for _ in range(args.repeats):
            for one_at_a_time in (True, False):
                side, acts = run_side(tasks, model, tok, args, one_at_a_time, pool)
                runs[one_at_a_time].append(side)
                actions.append(acts)
    single, batched = median_run(runs[True]), median_run(runs[False])
    ratio, act_ratio = batched["steps_per_s"] / single["steps_per_s"], batched["act_steps_per_s"] / single["act_steps_per_s"]
    ratios = [round(b["steps_per_s"] / s["steps_per_s"], 2) for s, b in zip(runs[True], runs[False])]
    costs = None
    if args.mode == "generate":
        groups = (args.num_envs + 1) // 2    # the engine's two slot groups: each act() batches about half the envs
        costs = forward_costs(model, tok.pad_token_id, round(batched["mean_prompt_tokens"]), groups,
                              args.max_new_tokens, args.seed)
    identical = all(a == actions[0] for a in actions)
    for name, side in (("one at a time", single), ("batched", batched)):
        print(f"{name:>14}: {side['steps_per_s']:7.1f} env-steps/s end to end, {side['act_steps_per_s']:7.1f} "
              f"counting act() only ({side['steps']} steps, {side['seconds']} s, {side['act_seconds']} s in act)")
    print(f"batched / one at a time: {ratio:.1f}x end to end (target >= {TARGET_RATIO:.0f}x; repeats "
          f"{', '.join(f'{r:.1f}' for r in ratios)}), {act_ratio:.1f}x in act(); actions identical: {identical}")
    if costs:
        one, many = costs["batch_1"], costs[f"batch_{groups}"]
        print(f"forward costs at {costs['prompt_tokens']} prompt tokens: prefill {one['prefill_ms']:.1f} ms at batch 1, "
              f"{many['prefill_ms'] / groups:.1f} ms per prompt at batch {groups}; decode step {one['decode_ms']:.2f} ms "
              f"at batch 1, {many['decode_ms']:.2f} ms at batch {groups}: predicted {costs['predicted_ratio']:.1f}x, "
              f"at most {costs['ratio_bound_free_decoding']:.1f}x even if batched decoding cost nothing")
    if args.json:
        write_json(args.json, {"one_at_a_time": single, "batched": batched, "ratio": round(ratio, 2),
                               "ratio_per_repeat": ratios, "runs": {"one_at_a_time": runs[True], "batched": runs[False]},
                               "forward_costs": costs,
                               "act_ratio": round(act_ratio, 2), "identical_actions": identical,
                               "provenance": provenance(vars(args), args.seed)})
    return 0 if identical else 1


if __name__ == "__main__":  # env workers start by re-importing this file
    sys.exit(main())
