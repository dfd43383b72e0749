"""Training memory with and without LoRA, side by side: full fine-tuning vs adapters (models/lora.py) on one model.

    python bench/lora_memory.py                     # a 0.16 B Llama with random weights, 3 SFT-shaped steps each
    python bench/lora_memory.py --hidden 256 --layers 4 --vocab 4000     # smaller and faster

The model is built with seeded random weights and saved to a temporary folder (an adapter needs a base folder),
then each mode runs in its own fresh process: load, (wrap with LoRA,) `--steps` AdamW steps on random token ids
with the loss on every token. Printed per mode: trainable parameters and their share, optimiser-state bytes (Adam
keeps two fp32 tensors per trainable parameter), and the process's peak resident memory; then the ratios.
Memory is not a timing: it does not depend on other jobs sharing the cores.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def build(folder: Path, args) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                         max_position_embeddings=1024, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder)


def train(folder: Path, lora_r: int, args) -> dict:
    import torch

    from agentprm.models import load_causal_lm
    from agentprm.models.lora import add_lora, trainable
    from agentprm.train.config import LoraConfig

    torch.set_num_threads(args.threads)
    model = load_causal_lm(folder)
    if lora_r:
        model = add_lora(model, LoraConfig(r=lora_r))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch, args.tokens), generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # Linux: kilobytes
    return {**trainable(model), "optimizer_state_mb": round(state / 2**20, 1), "peak_rss_mb": round(peak_kb / 1024, 1),
            "final_loss": round(float(loss), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", nargs=2, metavar=("FOLDER", "LORA_R"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(train(Path(args.child[0]), int(args.child[1]), args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "base"
        build(folder, args)
        rows = {}
        for name, r in (("full", 0), (f"lora r={args.lora_r}", args.lora_r)):
            out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", str(folder), str(r)],
                                 check=True, capture_output=True, text=True).stdout
            rows[name] = json.loads(out.strip().splitlines()[-1])
    print(f"model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; {args.steps} AdamW steps of "
          f"{args.batch} x {args.tokens} tokens, {args.threads} thread(s)")
    print(f"{'mode':<12} {'trainable':>12} {'share':>9} {'optimizer MB':>13} {'peak RSS MB':>12}")
    for name, r in rows.items():
        print(f"{name:<12} {r['trainable_params']:>12,} {r['trainable_fraction']:>9.4%} "
              f"{r['optimizer_state_mb']:>13.1f} {r['peak_rss_mb']:>12.1f}")
    full, lora = rows["full"], rows[f"lora r={args.lora_r}"]
    print(f"LoRA vs full: trainable parameters {full['trainable_params'] / lora['trainable_params']:.0f}x fewer, "
          f"optimizer state {full['optimizer_state_mb'] / max(lora['optimizer_state_mb'], 0.1):.0f}x smaller, "
          f"peak memory {full['peak_rss_mb'] / lora['peak_rss_mb']:.2f}x lower "
          f"({full['peak_rss_mb'] - lora['peak_rss_mb']:.0f} MB saved)")


if __name__ == "__main__":
    main()
