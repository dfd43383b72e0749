"""PRM training and scoring with one sequence per reply vs the replies of a state packed into one row
(`ProcessRewardModel.logits_packed`), side by side in one run on the same targets, model and batches.

    python bench/prm_throughput.py --targets runs/curve/targets/continuation-n240.parquet [--steps 30]
    python bench/prm_throughput.py --targets runs/curve/targets/n240.parquet

`--targets` is a Q-targets file whose rollouts are where its metadata says (scripts/critic_curve.py writes both:
`continuation-n240` holds π0's top 4 at each of 1,200 states, `n240` the MC targets of 1,440 rollouts, 1.04 rows a
state). For each side, in this process, one after the other:
- **train, pairs**: `--steps` Bradley-Terry steps (forward and backward) of 16 same-state pairs, the same batches;
- **train, states**: the same for the listwise loss (16 states, all their replies) where a state has two or more;
- **score**: every row once, no gradients, rows sorted by length in forwards of 32 (plain) or a state's rows in one
  packed row, 32 rows a forward (packed).
Prints ms per step / rows per second per side, the speed-up, and the largest logit difference between the sides
(they compute the same function: it must be float noise).
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch


def timed(fn, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=Path, required=True)
    ap.add_argument("--init", default=None, help="PRM init (default: the bundled π0)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rows", type=int, default=2000, help="rows scored per side (default 2000)")
    args = ap.parse_args()
    from agentprm.agent.encoding import prompt_ids, reply_ids
    from agentprm.data.tables import read_targets
    from agentprm.loop.run import DEFAULT_POLICY
    from agentprm.prm.losses import bradley_terry, plackett_luce
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.targets.mc import load_states
    from agentprm.targets.pairs import pair_indices

    targets = read_targets(args.targets)
    states = load_states(targets)
    prm = ProcessRewardModel.init(args.init or DEFAULT_POLICY, seed=0)
    keys, q = targets.table["state_key"].to_pylist(), targets.table["q"].to_pylist()
    prompts = {s.key(): prompt_ids(prm.tokenizer, s, prm.prompt) for s in states}
    replies = [reply_ids(prm.tokenizer, a) for a in targets.table["action"].to_pylist()]
    by_state: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        by_state.setdefault(k, []).append(i)
    tokens = sum(len(prompts[k]) + len(r) for k, r in zip(keys, replies))
    print(f"{args.targets}: {len(keys)} rows, {len(by_state)} states ({len(keys) / len(by_state):.2f} rows a state), "
          f"{tokens / len(keys):.0f} tokens a row; {sum(p.numel() for p in prm.parameters()) / 1e6:.2f} M parameters")
    opt = torch.optim.SGD(prm.parameters(), lr=0.0)   # lr 0: every step sees the same weights on both sides
    rng = random.Random(0)

    def step(loss) -> None:
        opt.zero_grad()
        loss.backward()
        opt.step()

    def compare(name: str, plain, packed, batches: list) -> None:
        for b in batches[:2]:                                         # warm-up, and the same numbers either way
            a, c = plain(b), packed(b)
            gap = float((a.detach() - c.detach()).abs().max())
        t_plain = timed(lambda: [step(plain(b).sum()) for b in batches])
        t_packed = timed(lambda: [step(packed(b).sum()) for b in batches])
        print(f"{name:14s} plain {1000 * t_plain / len(batches):7.1f} ms/step   packed {1000 * t_packed / len(batches):7.1f}"
              f" ms/step   speed-up {t_plain / t_packed:.2f}x   max |Δ logit| {gap:.1e}", flush=True)

    pairs = pair_indices(keys, q, 0.0)
    if pairs:
        batches = [[pairs[rng.randrange(len(pairs))] for _ in range(16)] for _ in range(args.steps)]

        def plain_pairs(batch):
            logits = prm.logits_of([prompts[keys[i]] + replies[i] for i, _ in batch] +
                                   [prompts[keys[j]] + replies[j] for _, j in batch])
            return bradley_terry(logits[:len(batch)], logits[len(batch):])[None]

        def packed_pairs(batch):
            logits = torch.stack(prm.logits_packed([prompts[keys[i]] for i, _ in batch],
                                                   [(replies[i], replies[j]) for i, j in batch]))
            return bradley_terry(logits[:, 0], logits[:, 1])[None]
        compare("train, pairs", plain_pairs, packed_pairs, batches)
    groups = [m for m in by_state.values() if len(m) > 1]
    if groups:
        batches = [[groups[rng.randrange(len(groups))] for _ in range(16)] for _ in range(args.steps)]

        def plain_states(batch):
            flat = prm.logits_of([prompts[keys[i]] + replies[i] for m in batch for i in m])
            return torch.cat([plackett_luce(f, torch.tensor([q[i] for i in m]))
                              for m, f in zip(batch, torch.split(flat, [len(m) for m in batch]))])

        def packed_states(batch):
            found = prm.logits_packed([prompts[keys[m[0]]] for m in batch], [[replies[i] for i in m] for m in batch])
            return torch.cat([plackett_luce(f, torch.tensor([q[i] for i in m])) for m, f in zip(batch, found)])
        compare("train, states", plain_states, packed_states, batches)

    rows = sorted(rng.sample(range(len(keys)), min(args.rows, len(keys))))
    chosen = set(rows)
    groups = [[i for i in m if i in chosen] for m in by_state.values()]
    groups = [m for m in groups if m]
    order = sorted(rows, key=lambda i: len(prompts[keys[i]]) + len(replies[i]))
    with torch.no_grad():
        plain_s = timed(lambda: [prm.logits_of([prompts[keys[i]] + replies[i] for i in order[lo:lo + 32]])
                                 for lo in range(0, len(order), 32)])
    packed_s = timed(lambda: prm.score_packed([prompts[keys[m[0]]] for m in groups],
                                              [[replies[i] for i in m] for m in groups], 32))
    print(f"{'score':14s} plain {len(rows) / plain_s:7.0f} rows/s    packed {len(rows) / packed_s:7.0f} rows/s    "
          f"speed-up {plain_s / packed_s:.2f}x   ({len(rows)} rows, {len(groups)} states)", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
