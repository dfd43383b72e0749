"""What a real model costs here: a randomly initialised model with the shapes of a 0.5 B chat model (Qwen2.5-0.5B's
config values, built locally; nothing downloaded), in bfloat16 on the CPU, through agentprm's own training and scoring
code at ALFWorld prompts of realistic length. Each phase runs in a fresh process and reports seconds per step (the
last of `--steps`, so the first's warm-up is excluded), how far a step raises the resident memory above where it
started (what the step needs beyond the loaded model: activations, logits, gradients, optimizer state), and the
process's peak resident memory (loading the model included).

    python bench/model_scale.py                       # 0.5 B shape, 1,024-token prompts (about 5 minutes on 2 cores)
    python bench/model_scale.py --layers 2 --vocab 4096 --prompt-tokens 256    # a quick smoke run
    python bench/model_scale.py --prompt-tokens 4096 --phases choose-packed choose-shared   # choose mode's memory

Phases: SFT (the reply-token loss), choose mode (30 admissible commands scored, packed behind a 4-D mask and on the
prompt's shared KV cache, agent/scoring.py), generate mode (4 samples of 32 tokens), PRM training (soft BCE on
(state, action) rows), online DPO (policy and frozen reference, chosen and rejected replies).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

QWEN05 = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
              num_key_value_heads=2, vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True)
PHASES = ("sft", "choose-packed", "choose-shared", "generate", "prm", "dpo")


def build(folder: Path, args) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.agent.tokenizer import build_tokenizer

    shape = {**QWEN05, "num_hidden_layers": args.layers, "vocab_size": args.vocab}
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**shape, max_position_embeddings=4096)).to(torch.bfloat16)
    save_policy(model, build_tokenizer(), folder, PromptConfig())
    print(f"built {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters ({folder})", flush=True)


def rss() -> int:
    """This process's resident memory now, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def tokens(n: int, vocab: int, gen) -> list[int]:
    import torch

    return torch.randint(3, vocab, (n,), generator=gen).tolist()


def phase(name: str, folder: Path, args) -> dict:
    import torch
    import torch.nn.functional as F

    from agentprm.agent.scoring import reply_logprobs, score_candidates
    from agentprm.models import load_causal_lm
    from agentprm.models.device import DeviceConfig, use_device

    torch.set_num_threads(args.threads)
    use_device(DeviceConfig(device="cpu", dtype="bfloat16"))
    gen = torch.Generator().manual_seed(0)
    prompt = tokens(args.prompt_tokens, args.vocab, gen)
    replies = [tokens(6, args.vocab, gen) for _ in range(30)]   # ALFWorld commands: a few tokens each
    seconds, grew = [], []

    def timed(step) -> None:
        """Run `step` --steps times; record each one's seconds and how far the resident memory rose above where it
        was before the first (sampled every 5 ms: what the steps need beyond the loaded model — activations, logits,
        gradients, the optimizer's state). The weights are read once first: safetensors maps them, and their pages
        would otherwise join the resident set during the first step."""
        with torch.no_grad():
            for p in set(model_of.parameters()):
                p.float().sum()
        base = rss()
        for _ in range(args.steps):
            peak, done = [0], threading.Event()

            def sample():
                while not done.wait(0.005):
                    peak[0] = max(peak[0], rss())
            watcher = threading.Thread(target=sample)
            watcher.start()
            start = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - start)
            done.set()
            watcher.join()
            grew.append(max(0, max(peak[0], rss()) - base))

    if name == "prm":
        from agentprm.prm.losses import soft_bce
        from agentprm.prm.model import ProcessRewardModel

        prm = model_of = ProcessRewardModel.init(folder)
        opt = torch.optim.AdamW([p for p in prm.parameters() if p.requires_grad], lr=1e-5)
        seqs = [prompt + r for r in replies[:args.batch]]

        def step():
            loss = soft_bce(prm.logits_of(seqs), torch.full((len(seqs),), 0.5))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        timed(step)
        return {"seconds_per_step": seconds[-1], "step_gb": max(grew) / 2**30}
    model = model_of = load_causal_lm(folder, dtype=torch.bfloat16)
    if name == "sft":
        from agentprm.policy.sft import Example, sft_loss

        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        batch = [Example(prompt + r, [-100] * len(prompt) + r) for r in replies[:args.batch]]

        def step():
            loss, _ = sft_loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        timed(step)
    elif name.startswith("choose"):
        from agentprm.agent import scoring

        per_token = scoring._memory_per_token
        if name == "choose-shared":   # the prompt's cache (in chunks within CACHE_BUDGET), whatever the row
            scoring._memory_per_token = lambda m: (float("inf"), per_token(m)[1])
        else:                         # packed, whatever the row
            scoring._memory_per_token = lambda m: (0.0, per_token(m)[1])
        model.eval()

        def step():
            with torch.no_grad():
                score_candidates(model, [prompt], [replies], 0)
        timed(step)
    elif name == "generate":
        from agentprm.agent.lm import HFBackend

        backend = HFBackend(model.eval(), 0, 1)
        timed(lambda: backend.generate([prompt], 4, 1.0, 32, seed=0))
    elif name == "dpo":
        import copy

        reference = copy.deepcopy(model).eval().requires_grad_(False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
        chosen, rejected = replies[:args.batch], replies[args.batch:2 * args.batch]
        prompts = [prompt] * args.batch

        def step():
            with torch.no_grad():
                ref = reply_logprobs(reference, prompts + prompts, chosen + rejected, 0)
            logp = reply_logprobs(model, prompts + prompts, chosen + rejected, 0)
            margin = (logp - ref)[:args.batch] - (logp - ref)[args.batch:]
            loss = -F.logsigmoid(0.03 * margin).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        timed(step)
    return {"seconds_per_step": seconds[-1], "step_gb": max(grew) / 2**30}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=QWEN05["num_hidden_layers"])
    ap.add_argument("--vocab", type=int, default=QWEN05["vocab_size"])
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="tokens of a state's prompt (default 1024)")
    ap.add_argument("--batch", type=int, default=2, help="rows per training step (default 2)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help="which phases (default all)")
    ap.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)   # one phase, in the child process
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        result = phase(args.phase, args.folder, args)
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # Linux: KiB
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        build(folder, args)
        print(f"prompt {args.prompt_tokens} tokens, 30 candidates x 6 tokens, batch {args.batch}, bfloat16, "
              f"{args.threads} threads; the last of {args.steps} steps")
        print(f"{'phase':<15}{'s/step':>9}{'step GB':>9}{'peak RSS GB':>13}")
        for name in args.phases:
            flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                     if k not in ("phase", "folder", "phases")]
            out = subprocess.run([sys.executable, __file__, *flags, "--phase", name, "--folder", str(folder)],
                                 capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"phase {name} failed:\n{out.stderr[-3000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{name:<15}{r['seconds_per_step']:>9.2f}{r['step_gb']:>9.2f}{r['peak_rss_gb']:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
