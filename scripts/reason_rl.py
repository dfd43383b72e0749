"""SPRO vs GRPO vs PRIME, token-level, on generated chain arithmetic (docs/studies/reasoning-rl.md).

    python scripts/reason_rl.py --out runs/reason-rl --seeds 0 1 2

Per seed: train and eval problems (`agentprm reason problems`' generator, that seed), a tiny reasoner SFT'd from
scratch on worked solutions of the first --train of them with 30% noisy ones (`ReasonerConfig`'s defaults), then
each method's RL run from that same reasoner on the same --rl-problems train problems SFT never saw (it memorises its
own: 51% of them right at the first RL step against 35% of eval problems) (`ReasonRLConfig`'s defaults but the method and β; SPRO's β swept with
--betas). Every model is judged by the greedy accuracy of its final policy on the same eval problems: differences
are paired over problems, seeds as strata (eval/paired.py). Also: accuracy vs RL step and vs seconds, entropy and
response length per step, and steps/seconds to reach GRPO's final accuracy (SPRO's efficiency claim).

Then the review's test of SPRO's process signal: on the final SPRO policy's sampled solutions to eval problems,
does a line's masked step advantage (MSA at the line's last token) tell the checker's wrong lines from right ones?
AUC against a random-score control (0.5).

Resumable: each seed's reasoner and each run's result JSON is kept and skipped when present. Writes
<out>/summary.json, <out>/report.md and <out>/curves.png.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from agentprm.agent.encoding import end_of_turn_id
from agentprm.eval.paired import paired_difference
from agentprm.io import provenance, write_json, write_text
from agentprm.prm.metrics import auc
from agentprm.reason.check import checker, step_verdicts
from agentprm.reason.config import ChainConfig, ReasonerConfig, ReasonRLConfig
from agentprm.reason.model import load_reasoner, prompt_ids, reasoner_for, response_text
from agentprm.reason.problems import chain_problems
from agentprm.reason.rl import greedy_outcomes, sample_groups, spro_token_advantages, token_logprobs, train_rl


def problems_of(seed: int, args, chain: ChainConfig):
    """(SFT's problems, RL's — train-split problems SFT never saw, eval problems)."""
    span = (chain.min_steps, chain.max_steps)
    train = chain_problems("train", args.train + args.rl_problems, seed, span, chain.digits, chain.ops)
    return train[:args.train], train[args.train:], chain_problems("eval", args.eval, seed, span, chain.digits, chain.ops)


VARIANTS = {"prime-filter": {"algo": "prime", "filter_low": 0.2, "filter_high": 0.8}}   # PRIME's own accuracy filter


def run_name(algo: str, beta: float | None) -> str:
    return algo if beta is None else f"{algo}-b{beta:g}"


def one_run(folder: Path, name: str, cfg: ReasonRLConfig, train, test, seed: int, check) -> dict:
    out = folder / f"{name}.json"
    if out.exists():
        return json.loads(out.read_text())
    model, tok = load_reasoner(folder / "reasoner")
    start = time.monotonic()
    log = train_rl(model, tok, train, cfg, check, test, seed=seed,
                   on_log=lambda r: print(f"  {name} seed {seed}: {json.dumps(r)}", flush=True))
    outcomes = greedy_outcomes(model, tok, test, check)
    result = {"name": name, "config": vars(cfg), "seed": seed, "log": log, "seconds": round(time.monotonic() - start, 1),
              "accuracy": sum(outcomes.values()) / len(outcomes), "per_task": {k: [int(v), 1] for k, v in outcomes.items()}}
    if cfg.algo == "spro":
        result["msa_auc"] = msa_auc(model, folder, tok, test, cfg, seed, check)
        model.save_pretrained(folder / f"{name}-policy")
    write_json(out, result)
    return result


def msa_auc(model, folder: Path, tok, test, cfg: ReasonRLConfig, seed: int, check) -> dict:
    """AUC of the line-level MSA (at each line's last token) for right lines vs the checker's wrong ones (the first
    error and after), on sampled solutions of the eval problems; and of a random score."""
    reference, _ = load_reasoner(folder / "reasoner")
    end = end_of_turn_id(tok)
    batch = sample_groups(model.eval(), tok, test, cfg, check, end, seed=seed + 999)
    right, wrong = [], []
    newline = tok("\n", add_special_tokens=False)["input_ids"][-1]
    for problem, responses, outcomes in batch.groups:
        prompts = [prompt_ids(tok, problem)] * len(responses)
        with torch.no_grad():
            lp, mask, _ = token_logprobs(model, prompts, responses, tok.pad_token_id)
            ref, _, _ = token_logprobs(reference, prompts, responses, tok.pad_token_id)
        msa = spro_token_advantages(outcomes, lp - ref, mask, cfg.beta) - (
            spro_token_advantages(outcomes, torch.zeros_like(lp), mask, cfg.beta))   # the MSA part alone
        for i, resp in enumerate(responses):
            text = response_text(tok, resp, end)
            verdict = step_verdicts(problem, text)
            ends = [k for k, t in enumerate(resp) if t == newline] + [len([t for t in resp if t != end]) - 1]
            first = verdict.first_error if verdict.first_error is not None else len(verdict.lines)
            for line, pos in enumerate(ends[:len(verdict.lines)]):
                (right if line < first else wrong).append(float(msa[i, pos]))
    rng = random.Random(seed)
    return {"auc": auc(right, wrong) if right and wrong else None, "right_lines": len(right),
            "wrong_lines": len(wrong), "random_auc": auc([rng.random() for _ in right], [rng.random() for _ in wrong])
            if right and wrong else None}


def steps_to(log: list[dict], target: float) -> tuple[int | None, float | None]:
    for row in log:
        if "eval_accuracy" in row and row["eval_accuracy"] >= round(target, 4):   # the log rounds to 4 places
            return row["step"], row["seconds"]
    return None, None


def report(results: dict, seeds: list[int], names: list[str], base: dict) -> tuple[dict, str]:
    def per_task(name):
        return {s: results[s][name]["per_task"] for s in seeds}

    summary, lines = {}, ["| method | accuracy % (mean of seeds) | Δ vs SFT, points [95% CI] | Δ vs GRPO [95% CI] | "
                          "steps (s) to GRPO's final | final entropy | final length |", "|---|---|---|---|---|---|---|"]
    base_tasks = {s: base[s]["per_task"] for s in seeds}
    grpo_final = {s: results[s]["grpo"]["accuracy"] for s in seeds} if "grpo" in names else None
    base_acc = sum(base[s]["accuracy"] for s in seeds) / len(seeds)
    lines.append(f"| SFT (the start) | {100 * base_acc:.1f} | | | | | |")
    for name in names:
        acc = sum(results[s][name]["accuracy"] for s in seeds) / len(seeds)
        vs_base = paired_difference(per_task(name), base_tasks)
        vs_grpo = paired_difference(per_task(name), per_task("grpo")) if grpo_final and name != "grpo" else None
        reach = [steps_to(results[s][name]["log"], grpo_final[s]) for s in seeds] if grpo_final else []
        last = [results[s][name]["log"][-1] for s in seeds]
        entropy = [r["entropy"] for r in last if "entropy" in r]
        summary[name] = {"accuracy": acc, "vs_sft": vs_base, "vs_grpo": vs_grpo, "reach_grpo_final": reach,
                         "final_entropy": sum(entropy) / len(entropy) if entropy else None,
                         "final_length": sum(r["mean_length"] for r in last) / len(last),
                         "msa_auc": [results[s][name].get("msa_auc") for s in seeds]}
        cell = lambda d: f"{100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]"  # noqa
        reached = "; ".join(f"{st} ({sec:.0f})" if st else "not" for st, sec in reach) if reach else ""
        lines.append(f"| {name} | {100 * acc:.1f} | {cell(vs_base)} | {cell(vs_grpo) if vs_grpo else ''} | {reached} | "
                     f"{summary[name]['final_entropy'] or float('nan'):.3f} | {summary[name]['final_length']:.1f} |")
    return summary, "\n".join(lines)


def plot(results: dict, seeds: list[int], names: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for name in names:
        logs = [results[s][name]["log"] for s in seeds]
        evals = [[r for r in log if "eval_accuracy" in r] for log in logs]
        xs = [r["step"] for r in evals[0]]
        axes[0].plot(xs, [sum(e[k]["eval_accuracy"] for e in evals) / len(evals) for k in range(len(xs))], label=name)
        axes[1].plot([sum(e[k]["seconds"] for e in evals) / len(evals) for k in range(len(xs))],
                     [sum(e[k]["eval_accuracy"] for e in evals) / len(evals) for k in range(len(xs))], label=name)
        steps_ = [r["step"] for r in logs[0]]
        for ax, key in ((axes[2], "entropy"), (axes[3], "mean_length")):
            ax.plot(steps_, [sum(log[k].get(key, float("nan")) for log in logs) / len(logs) for k in range(len(steps_))],
                    label=name)
    for ax, (x, y) in zip(axes, [("RL step", "greedy eval accuracy"), ("seconds", "greedy eval accuracy"),
                                 ("RL step", "token entropy"), ("RL step", "response tokens")]):
        ax.set_xlabel(x), ax.set_ylabel(y), ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algos", nargs="+", default=["grpo", "spro", "prime", "prime-filter"],
                    help=f"grpo, spro, prime, or a variant: {', '.join(VARIANTS)}")
    ap.add_argument("--betas", type=float, nargs="*", default=[], help="extra SPRO runs at these β (the sweep)")
    ap.add_argument("--train", type=int, default=4000, help="SFT's train problems per seed")
    ap.add_argument("--rl-problems", type=int, default=4000, help="RL's train problems per seed (others than SFT's)")
    ap.add_argument("--eval", type=int, default=300, help="eval problems per seed")
    ap.add_argument("--sft-steps", type=int, default=ReasonerConfig.steps)
    ap.add_argument("--rl-steps", type=int, default=ReasonRLConfig.steps)
    ap.add_argument("--checker", default="numeric")
    args = ap.parse_args()
    out, chain, check = Path(args.out), ChainConfig(), checker(args.checker)
    names = [run_name(a, None) for a in args.algos] + [run_name("spro", b) for b in args.betas]
    results, base = {}, {}
    for seed in args.seeds:
        folder = out / f"seed{seed}"
        sft_problems, train, test = problems_of(seed, args, chain)
        model, tok = reasoner_for(folder / "reasoner", sft_problems, ReasonerConfig(steps=args.sft_steps), seed)
        if not (folder / "sft.json").exists():
            outcomes = greedy_outcomes(model, tok, test, check)
            write_json(folder / "sft.json", {"accuracy": sum(outcomes.values()) / len(outcomes),
                                             "per_task": {k: [int(v), 1] for k, v in outcomes.items()}})
        base[seed] = json.loads((folder / "sft.json").read_text())
        print(f"seed {seed}: SFT greedy accuracy {base[seed]['accuracy']:.3f}", flush=True)
        results[seed] = {}
        for algo in args.algos:
            cfg = ReasonRLConfig(**{"algo": algo, **VARIANTS.get(algo, {}), "steps": args.rl_steps})
            results[seed][algo] = one_run(folder, algo, cfg, train, test, seed, check)
        for beta in args.betas:
            results[seed][run_name("spro", beta)] = one_run(
                folder, run_name("spro", beta), ReasonRLConfig(algo="spro", beta=beta, steps=args.rl_steps), train,
                test, seed, check)
    summary, table = report(results, args.seeds, names, base)
    plot(results, args.seeds, names, out / "curves.png")
    write_json(out / "summary.json", {"methods": summary, "seeds": args.seeds,
                                      "sft_accuracy": {s: base[s]["accuracy"] for s in args.seeds},
                                      "provenance": provenance(vars(args))})
    write_text(out / "report.md", table + "\n")
    print(table)


if __name__ == "__main__":
    main()
