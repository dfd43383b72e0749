"""Whether an explicit `torch.set_num_threads` changes training numerics, and speed, at the same thread count:
AdamW steps of the bundled π0 on fixed random tokens (seed 0; `--batch` rows of 200) in fresh processes — torch's
default count left alone, the default set explicitly, and 1 then the default — each printing a hash of the weights
after 3 steps and the seconds per step of the `--time-steps` that follow. The modes take turns, `--repeats` rounds,
one process at a time.

    python bench/thread_numerics.py [--time-steps 40] [--repeats 2] [--batch 4]

Why it matters (docs/results.md, "The slowdown was torch's threads"): a resumed run must train the same weights as
an uninterrupted one, so a process's thread state may not depend on whether it ran rollouts first; `use_device`
now sets the count in every process (models/device.py).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = """
import hashlib, sys, time, torch
default = torch.get_num_threads()
if sys.argv[1] == "explicit":
    torch.set_num_threads(default)
elif sys.argv[1] == "toggled":
    torch.set_num_threads(1); torch.set_num_threads(default)
from agentprm.agent.lm import LMAgent
from pathlib import Path
import agentprm
torch.manual_seed(0)
policy = Path(agentprm.__file__).parent / "assets" / "policy"
model = LMAgent.load(policy, mode="choose", temperature=1.0, seed=0).backend.model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(3, 300, (int(sys.argv[3]), 200))
def step():
    model(input_ids=ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()
for _ in range(3):
    step()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
start = time.perf_counter()
for _ in range(int(sys.argv[2])):
    step()
print(default, digest, (time.perf_counter() - start) / max(1, int(sys.argv[2])))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4, help="rows of 200 tokens per step (the PRM stage trains on 16)")
    args = ap.parse_args()
    seconds: dict[str, list[float]] = {}
    for round_ in range(args.repeats):
        for mode in ("default", "explicit", "toggled"):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.time_steps), str(args.batch)],
                                 capture_output=True, text=True, check=True)
            threads, digest, per_step = out.stdout.split()
            seconds.setdefault(mode, []).append(float(per_step))
            print(f"round {round_ + 1} {mode:>8} ({threads} threads): weights {digest}  {1000 * float(per_step):.1f} "
                  f"ms/step", flush=True)
    base = statistics.median(seconds["default"])
    for mode, values in seconds.items():
        median = statistics.median(values)
        print(f"{mode:>8}: median {1000 * median:.1f} ms/step, {base / median:.2f}x the default's speed", flush=True)


if __name__ == "__main__":
    main()
