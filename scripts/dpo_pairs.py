"""What the policy update's DPO pairs ask of π: does the critic's chosen reply agree with π's own preference?

    python scripts/dpo_pairs.py --runs runs/fig3/low/seed0 runs/fig3/high/seed0 ... [--states 400] [--json F]

For each finished loop run: `--states` distinct states of its iteration-1 rollouts (drawn with `--seed`), π0 (the
run's policy_0) samples replies at them as the update's first step does (choose mode, `policy.samples_per_state` at
`policy.temperature`), and the pairs are formed exactly as online DPO forms them (`preference_pairs`) — once with the
run's Q1 and once with the uniform critic (seeded random scores, the Fig. 3 control). For every pair: does the chosen
reply y_w have the higher π0 probability? A critic whose chosen reply agrees with π0 on a share a < 0.5 of pairs
pushes π away from its own first choices — on this π0, whose own order of its alternatives is right on 56.6% of the
oracle's pairs (docs/results.md, the learning curve), that is a push toward worse replies, applied at every step;
the uniform critic agrees on 0.5 in expectation and its pushes cancel. Runs are pooled by their parent folder (the
sweep's variant); the 95% CI bootstraps states within each run.
"""
from __future__ import annotations

import argparse
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import yaml

from agentprm.agent.encoding import prompt_ids, reply_ids
from agentprm.agent.lm import LMAgent
from agentprm.agent.scoring import score_candidates
from agentprm.io import write_json
from agentprm.policy.online_dpo import preference_pairs, rollout_states
from agentprm.prm.loading import load_prm
from agentprm.search import UniformCritic


def agreement(pairs: list[tuple[int, str, str]], logp: dict[tuple[int, str], float]) -> list[tuple[int, bool]]:
    """(state index, whether y_w has the higher log π0) per pair; a tie counts as disagreement."""
    return [(i, logp[(i, w)] > logp[(i, lose)]) for i, w, lose in pairs]


def share_ci(per_run: list[list[tuple[int, bool]]], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The pooled share of agreeing pairs and its 95% CI, resampling states within each run."""
    rng = np.random.default_rng(seed)
    groups = [list(by_state.values()) for by_state in (_by_state(run) for run in per_run)]
    total = [v for g in groups for pair_set in g for v in pair_set]
    if not total:
        return float("nan"), float("nan"), float("nan")
    draws = []
    for _ in range(resamples):
        picked = [v for g in groups if g for k in rng.integers(0, len(g), len(g)) for v in g[k]]
        draws.append(sum(picked) / len(picked) if picked else float("nan"))
    lo, hi = np.nanpercentile(draws, [2.5, 97.5])
    return sum(total) / len(total), float(lo), float(hi)


def _by_state(found: list[tuple[int, bool]]) -> dict[int, list[bool]]:
    out: dict[int, list[bool]] = defaultdict(list)
    for i, agrees in found:
        out[i].append(agrees)
    return out


def measure(run: Path, states: int, seed: int) -> dict:
    """One run's pairs under Q1 and under the uniform critic, with their agreement with π0."""
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    policy = cfg.get("policy", {})
    pool = rollout_states(run / "iter_1" / "rollouts")
    picked = random.Random(seed).sample(pool, min(states, len(pool)))
    pi0 = LMAgent.load(run / "policy_0", mode="choose", temperature=policy.get("temperature", 0.7), seed=seed)
    samples = pi0.sample(picked, [None] * len(picked), policy.get("samples_per_state", 2))
    replies = [list(dict.fromkeys(r)) for r in samples]
    tok = pi0.tokenizer
    scores = score_candidates(pi0.backend.model, [prompt_ids(tok, s, pi0.prompt_cfg) for s in picked],
                              [[reply_ids(tok, r) for r in rs] for rs in replies], tok.pad_token_id)
    logp = {(i, r): float(v) for i, (rs, row) in enumerate(zip(replies, scores)) for r, v in zip(rs, row)}
    out = {"run": str(run), "states": len(picked), "differing": sum(len(r) > 1 for r in replies)}
    for name, critic in (("q1", load_prm(run / "iter_1" / "prm")), ("uniform", UniformCritic(seed))):
        with torch.no_grad():
            pairs, _, _ = preference_pairs(critic, picked, samples, policy.get("min_margin", 0.0))
        out[name] = agreement(pairs, logp)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, nargs="+", required=True, help="finished loop runs (e.g. runs/fig3/*/seed*)")
    ap.add_argument("--states", type=int, default=400, help="rollout states drawn per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the per-run pairs and the table here")
    args = ap.parse_args(argv)
    if args.states < 1:
        raise SystemExit(f"--states {args.states}: must be at least 1")
    for run in args.runs:
        for need in ("config.yaml", "policy_0", "iter_1/rollouts", "iter_1/prm"):
            if not (run / need).exists():
                raise SystemExit(f"{run}: no {need} (a finished loop run with iteration 1 is needed)")
    found = [measure(run, args.states, args.seed) for run in args.runs]
    groups: dict[str, list[dict]] = defaultdict(list)
    for f in found:
        groups[Path(f["run"]).parent.name].append(f)
    lines = ["| runs | states (with 2 different samples) | critic | DPO pairs | y_w agrees with π0's order | 95% CI |",
             "|---|---|---|---|---|---|"]
    table = []
    for group, runs in groups.items():
        for critic in ("q1", "uniform"):
            share, lo, hi = share_ci([r[critic] for r in runs], seed=args.seed)
            n = sum(len(r[critic]) for r in runs)
            table.append({"group": group, "critic": critic, "pairs": n, "agree": share, "ci95": [lo, hi]})
            states, differing = sum(r["states"] for r in runs), sum(r["differing"] for r in runs)
            lines.append(f"| {group} ({len(runs)}) | {states} ({differing}) | {critic} | {n} | {share:.3f} | "
                         f"[{lo:.3f}, {hi:.3f}] |")
    print("\n".join(lines))
    if args.json:
        write_json(args.json, {"runs": found, "table": table, "states": args.states, "seed": args.seed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
