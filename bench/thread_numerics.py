"""Whether an explicit `torch.set_num_threads` changes training numerics at the same thread count: 3 AdamW steps of
the bundled π0 on fixed random tokens (seed 0) in three fresh processes — torch's default count left alone, the
default set explicitly, and 1 then the default — each printing a hash of the weights.

    python bench/thread_numerics.py

Why it matters (docs/results.md, "The slowdown was torch's threads"): a resumed run must train the same weights as
an uninterrupted one, so a process's thread state may not depend on whether it ran rollouts first.
"""
from __future__ import annotations

import subprocess
import sys

CHILD = """
import hashlib, sys, torch
default = torch.get_num_threads()
if sys.argv[1] == "explicit":
    torch.set_num_threads(default)
elif sys.argv[1] == "toggled":
    torch.set_num_threads(1); torch.set_num_threads(default)
from agentprm.agent.lm import LMAgent
from pathlib import Path
import agentprm
torch.manual_seed(0)
model = LMAgent.load(Path(agentprm.__file__).parent / "assets" / "policy", mode="choose", temperature=1.0, seed=0).backend.model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(3, 300, (4, 200))
for _ in range(3):
    model(input_ids=ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()
print(default, hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16])
"""


def main() -> None:
    for mode in ("default", "explicit", "toggled"):
        out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
        threads, digest = out.stdout.split()
        print(f"{mode:>8} ({threads} threads): weights {digest}", flush=True)


if __name__ == "__main__":
    main()
