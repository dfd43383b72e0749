"""Step PRMs on generated chain arithmetic (docs/studies/reasoning-rl.md): BCE vs PQM on the same
Monte-Carlo step labels, judged against the checker's ground truth, and PRM-guided Best-of-N against majority vote
and an outcome reward model at equal samples.

    python scripts/reason_step_prm.py --out runs/reason-prm --seeds 0 1 2 [--reasoners runs/reason-rl]

Per seed: the SFT reasoner π (from --reasoners/seed<s>/reasoner when there, else trained here, as
scripts/reason_rl.py does); one sampled solution of each of --label-problems train problems that SFT never saw
(π memorises its own), labelled by K
completions from every step prefix (labels.py); step PRMs from π's backbone trained on them with `bce` (soft labels),
`bce` (hard labels), `pqm`, and an `orm` (outcome only). On --samples solutions sampled from π for each eval problem:

- first-error F1 (ProcessBench: threshold 0.5) against the checker's first wrong line, over the solutions π writes
  (F1 is the harmonic mean of the two per-class accuracies, so the mix of right and wrong does not move it; the JSON
  also holds it on a balanced draw);
- the same F1 at the threshold that maximises it on those calibration solutions (PQM ranks steps and has
  no absolute scale, so 0.5 means nothing to it);
- calibration of the step scores: ECE against the checker's truth "no wrong line up to here", and against
  Monte-Carlo labels of one solution of each of --calibration other eval problems (what the PRM is trained to
  estimate);
- Best-of-N accuracy for N = 1, 2, 4, ... --samples: each PRM under min / last / product aggregation, the ORM,
  majority vote over final answers, and a random pick; paired CIs (over problems, seeds as strata) at the largest N;
- step-level beam search (reason/search.py) for each --beams W×K with the BCE-soft PRM (min aggregation) and, as its
  control, the same search ranking prefixes by a seeded hash; beside Best-of-(W·K) and majority vote over W·K
  samples, with the generated tokens each spends.

Resumable: a seed's labels, PRMs' scores, its BCE-soft PRM (prm-bce-soft/) and results are kept and skipped when
present.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from pathlib import Path

from agentprm.eval.paired import paired_difference
from agentprm.io import provenance, write_json, write_text
from agentprm.reason.check import checker, final_answer, step_verdicts
from agentprm.reason.config import ChainConfig, ReasonerConfig, StepPRMConfig
from agentprm.reason.labels import StepExample, label_solutions
from agentprm.reason.metrics import expected_calibration_error, first_error_f1, reliability
from agentprm.reason.model import HFCompleter, reasoner_for, sample
from agentprm.reason.problems import chain_problems
from agentprm.reason.search import StepSampler, prm_scorer, random_scorer, step_beam
from agentprm.reason.step_prm import AGGREGATIONS, StepPRM, aggregate, train_step_prm

PRMS = {"bce-soft": StepPRMConfig(loss="bce", labels="soft"), "bce-hard": StepPRMConfig(loss="bce", labels="hard"),
        "pqm": StepPRMConfig(loss="pqm"), "orm": StepPRMConfig(loss="orm")}


def labelled(model, tok, problems, k: int, seed: int, check) -> list[StepExample]:
    solutions = [s[0] for s in sample(model, tok, problems, 1, 1.0, seed)]
    return label_solutions(problems, solutions, HFCompleter(model, tok, 1.0), k, check, seed + 1)


THRESHOLDS = [k / 20 for k in range(1, 20)]


def cached(path: Path, problems, make) -> list[StepExample]:
    """Labelled solutions, kept in `path` (a study resumes past its most expensive part)."""
    if path.exists():
        by_id = {p.id: p for p in problems}
        return [StepExample(by_id[r["id"]], tuple(r["lines"]), tuple(r["soft"]), tuple(r["hard"]), r["outcome"])
                for r in json.loads(path.read_text())]
    examples = make()
    write_json(path, [{"id": e.problem.id, "lines": list(e.lines), "soft": list(e.soft), "hard": list(e.hard),
                       "outcome": e.outcome} for e in examples])
    return examples


def balanced(indices_right: list[int], indices_wrong: list[int], seed: int) -> list[int]:
    n = min(len(indices_right), len(indices_wrong))
    rng = random.Random(seed)
    return rng.sample(indices_right, n) + rng.sample(indices_wrong, n)


def seed_data(folder: Path, seed: int, args, chain: ChainConfig, check):
    """A seed's problems (SFT's, the labelled ones, eval, calibration), its reasoner π and π's labelled solutions."""
    span = (chain.min_steps, chain.max_steps)
    train = chain_problems("train", args.train + args.label_problems, seed, span, chain.digits, chain.ops)
    held_out = chain_problems("eval", args.eval + args.calibration, seed, span, chain.digits, chain.ops)
    source = Path(args.reasoners) / f"seed{seed}" / "reasoner" if args.reasoners else folder / "reasoner"
    model, tok = reasoner_for(source, train[:args.train], ReasonerConfig(), seed)
    examples = cached(folder / "labels.json", train[args.train:],
                      lambda: labelled(model, tok, train[args.train:], args.k, seed, check))   # problems SFT never saw
    return held_out[:args.eval], held_out[args.eval:], source, model, tok, examples


def run_seed(folder: Path, seed: int, args, chain: ChainConfig, check) -> dict:
    out = folder / "result.json"
    if out.exists():
        return json.loads(out.read_text())
    test, calib_problems, source, model, tok, examples = seed_data(folder, seed, args, chain, check)
    print(f"seed {seed}: {len(examples)} labelled solutions, {sum(e.outcome for e in examples):.0f} right", flush=True)
    solutions = sample(model, tok, test, args.samples, 1.0, seed + 7)
    flat = [(i, j) for i in range(len(test)) for j in range(args.samples)]
    truth = [step_verdicts(test[i], solutions[i][j]) for i, j in flat]
    calib = cached(folder / "calibration.json", calib_problems,
                   lambda: labelled(model, tok, calib_problems, args.k, seed + 11, check))
    calib_firsts = [step_verdicts(e.problem, "\n".join(e.lines)).first_error for e in calib]
    result: dict = {"seed": seed, "labelled": len(examples), "label_right": sum(e.outcome for e in examples),
                    "pi_accuracy": sum(v.correct for v in truth) / len(truth), "prms": {}, "bon": {}}
    scores_of = {}
    for name, cfg in PRMS.items():
        prm = StepPRM.from_reasoner(source, seed=seed)
        train_step_prm(prm, examples, cfg, seed=seed)
        scores = prm.step_scores([test[i] for i, _ in flat], [solutions[i][j] for i, j in flat])
        scores_of[name] = scores
        firsts = [v.first_error for v in truth]
        right_idx = [k for k, f in enumerate(firsts) if f is None]
        wrong_idx = [k for k, f in enumerate(firsts) if f is not None]
        even = balanced(right_idx, wrong_idx, seed)
        natural, bal = first_error_f1(scores, firsts), first_error_f1([scores[k] for k in even], [firsts[k] for k in even])
        calib_scores = prm.step_scores([e.problem for e in calib], ["\n".join(e.lines) for e in calib])
        threshold = max(THRESHOLDS, key=lambda t: first_error_f1(calib_scores, calib_firsts, t).f1)
        tuned = first_error_f1(scores, firsts, threshold)   # the threshold picked on other problems (calibration's)
        prefix_ok = [float(v.first_error is None or line < v.first_error) for v in truth for line in range(len(v.lines))]
        flat_scores = [x for s, v in zip(scores, truth) for x in s[:len(v.lines)]]
        mc_p = [x for s in calib_scores for x in s]
        mc_y = [y for e in calib for y in e.soft]
        result["prms"][name] = {"f1": vars(natural), "f1_balanced": vars(bal), "threshold": threshold,
                                "f1_tuned": vars(tuned),
                                "ece_vs_checker": expected_calibration_error(flat_scores, prefix_ok),
                                "ece_vs_mc": expected_calibration_error(mc_p, mc_y),
                                "reliability_vs_mc": [vars(b) for b in reliability(mc_p, mc_y)]}
        print(f"seed {seed} {name}: {result['prms'][name]}", flush=True)
    result["bon"] = best_of_n(test, solutions, scores_of, truth, flat, args.samples, seed, check)
    write_json(out, result)
    return json.loads(out.read_text())    # as a resumed run reads it (N keys as text)


def beam_seed(folder: Path, seed: int, args, chain: ChainConfig, check) -> dict:
    """Step-level beam search with the BCE-soft PRM and with the hash control, for each --beams W×K (beam.json)."""
    out = folder / "beam.json"
    if out.exists():
        return json.loads(out.read_text())
    test, _, source, model, tok, examples = seed_data(folder, seed, args, chain, check)
    prm_dir = folder / "prm-bce-soft"
    if not (prm_dir / "config.json").is_file():
        prm = StepPRM.from_reasoner(source, seed=seed)
        train_step_prm(prm, examples, PRMS["bce-soft"], seed=seed)
        prm.save(prm_dir, config=vars(PRMS["bce-soft"]), seed=seed)
    prm = StepPRM.load(prm_dir)
    whole = sample(model, tok, test, 4, 1.0, seed + 7)      # a whole solution's generated tokens (its end of turn too)
    per_solution = sum(len(tok(s, add_special_tokens=False)["input_ids"]) + 1 for x in whole for s in x) / (4 * len(test))
    result: dict = {"seed": seed, "solution_tokens": per_solution, "beams": {}}
    sampler = StepSampler(model, tok)
    for beam in args.beams:
        width, expand = map(int, beam.split("x"))
        for name, score in (("prm", prm_scorer(prm, "min")), ("hash", random_scorer(seed))):
            start = time.monotonic()
            found = step_beam(sampler, score, test, width, expand, seed + 13)
            result["beams"][f"{beam}/{name}"] = {
                "outcomes": {p.id: int(check(p, r.solution)) for p, r in zip(test, found)},
                "tokens": sum(r.tokens for r in found) / len(found), "seconds": round(time.monotonic() - start, 1)}
            print(f"seed {seed} beam {beam} {name}: {result['beams'][f'{beam}/{name}']['tokens']:.0f} tokens, "
                  f"{sum(result['beams'][f'{beam}/{name}']['outcomes'].values()) / len(test):.3f}", flush=True)
    write_json(out, result)
    return result


def best_of_n(test, solutions, scores_of, truth, flat, samples: int, seed: int, check) -> dict:
    """{selector: {N: per-problem outcome}} for N = 1, 2, 4, ... samples."""
    by_problem: dict[int, list[int]] = {}
    for k, (i, _) in enumerate(flat):
        by_problem.setdefault(i, []).append(k)
    sizes = [n for n in (1, 2, 4, 8, 16, 32, 64, 128) if n <= samples]
    selectors = {f"{name}/{how}": (name, how) for name in scores_of if name != "orm" for how in AGGREGATIONS}
    selectors["orm"] = ("orm", "last")
    rng = random.Random(seed)
    out: dict[str, dict[int, dict[str, int]]] = {}
    for n in sizes:
        for label, (name, how) in selectors.items():
            out.setdefault(label, {})[n] = {
                test[i].id: int(truth[max(ks[:n], key=lambda k: aggregate(scores_of[name][k], how))].correct)
                for i, ks in by_problem.items()}
        majority = {}
        for i, ks in by_problem.items():
            votes = Counter(a for a in (final_answer(solutions[i][flat[k][1]]) for k in ks[:n]) if a is not None)
            majority[test[i].id] = int(bool(votes) and check(test[i], f"Answer: {votes.most_common(1)[0][0]}"))
        out.setdefault("majority", {})[n] = majority
        out.setdefault("random", {})[n] = {test[i].id: int(truth[rng.choice(ks[:n])].correct)
                                           for i, ks in by_problem.items()}
    return out


def beam_table(results: dict, beams: dict, seeds: list[int], shapes: list[str], table: dict) -> list[str]:
    """Beam search (PRM, hash control) beside Best-of-(W·K) and majority over W·K samples: accuracy, tokens, and
    paired differences over problems with seeds as strata."""
    per_solution = sum(beams[s]["solution_tokens"] for s in seeds) / len(seeds)
    lines = ["", f"Step-level beam search (BCE-soft PRM, min) vs Best-of-N at N = W·K samples (a whole solution: "
             f"{per_solution:.1f} generated tokens):", "",
             "| search | tokens a problem | accuracy % | beam (PRM) − this, points [95% CI] |", "|---|---|---|---|"]
    table["beam"] = {"solution_tokens": per_solution}
    for shape in shapes:
        width, expand = map(int, shape.split("x"))
        n = str(width * expand)
        rows = {}
        for key, label in (("prm", "PRM"), ("hash", "hash (control)")):
            runs = {s: beams[s]["beams"][f"{shape}/{key}"] for s in seeds}
            rows[f"beam {shape}, {label}"] = ({s: r["outcomes"] for s, r in runs.items()},
                                              sum(r["tokens"] for r in runs.values()) / len(seeds))
        if all(n in results[s]["bon"]["majority"] for s in seeds):
            for sel, label in (("bce-soft/min", f"Best-of-{n}, PRM"), ("majority", f"majority of {n}")):
                rows[label] = ({s: results[s]["bon"][sel][n] for s in seeds}, int(n) * per_solution)
        base = rows[f"beam {shape}, PRM"][0]
        for label, (outcomes, tokens) in rows.items():
            acc = sum(sum(o.values()) for o in outcomes.values()) / sum(len(o) for o in outcomes.values())
            cell = {"accuracy": acc, "tokens": tokens}
            delta = ""
            if outcomes is not base:
                d = paired_difference({s: {k: [v, 1] for k, v in base[s].items()} for s in seeds},
                                      {s: {k: [v, 1] for k, v in outcomes[s].items()} for s in seeds})
                cell["beam_minus_this"] = d
                delta = f"{100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]"
            table["beam"][label] = cell
            lines.append(f"| {label} | {tokens:.0f} | {100 * acc:.1f} | {delta} |")
    return lines


def plot_reliability(results: dict, seeds: list[int], path: Path) -> None:
    """The reliability diagram of each step PRM against held-out MC labels, bins pooled over seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "k:", lw=1)
    for name in PRMS:
        bins = [results[s]["prms"][name]["reliability_vs_mc"] for s in seeds]
        xs, ys = [], []
        for k in range(len(bins[0])):
            n = sum(b[k]["count"] for b in bins)
            if n:
                xs.append(sum(b[k]["count"] * b[k]["mean_p"] for b in bins if b[k]["count"]) / n)
                ys.append(sum(b[k]["count"] * b[k]["mean_y"] for b in bins if b[k]["count"]) / n)
        ax.plot(xs, ys, "o-", label=name, ms=3)
    ax.set_xlabel("step score p (bin mean)"), ax.set_ylabel("held-out MC label (bin mean)"), ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--reasoners", help="a scripts/reason_rl.py output folder whose seed<s>/reasoner to use")
    ap.add_argument("--train", type=int, default=4000, help="SFT's train problems per seed (as scripts/reason_rl.py)")
    ap.add_argument("--eval", type=int, default=300, help="eval problems per seed")
    ap.add_argument("--label-problems", type=int, default=1500,
                    help="train problems SFT never saw, one sampled solution of each labelled")
    ap.add_argument("--k", type=int, default=8, help="completions per step prefix (Monte-Carlo labels)")
    ap.add_argument("--samples", type=int, default=64, help="solutions per eval problem (the largest N)")
    ap.add_argument("--calibration", type=int, default=150, help="other eval problems, one solution each with MC labels")
    ap.add_argument("--beams", nargs="*", default=["2x2", "4x4", "8x8"], metavar="WxK",
                    help="step-level beam searches: width x expansion (none: skip the beam stage)")
    ap.add_argument("--checker", default="numeric")
    args = ap.parse_args()
    out, chain, check = Path(args.out), ChainConfig(), checker(args.checker)
    results = {seed: run_seed(out / f"seed{seed}", seed, args, chain, check) for seed in args.seeds}
    beams = {seed: beam_seed(out / f"seed{seed}", seed, args, chain, check) for seed in args.seeds} if args.beams else {}
    seeds = args.seeds
    lines = ["| step PRM | first-error F1 at 0.5 | acc. on wrong / right solutions | F1 at a tuned threshold | "
             "ECE vs checker | ECE vs held-out MC |", "|---|---|---|---|---|---|"]
    table: dict = {"prms": {}, "bon": {}}
    for name in PRMS:
        rows = [results[s]["prms"][name] for s in seeds]
        mean = lambda f: sum(f(r) for r in rows) / len(rows)   # noqa: E731
        cell = {"f1": mean(lambda r: r["f1"]["f1"]), "f1_balanced": mean(lambda r: r["f1_balanced"]["f1"]),
                "f1_tuned": mean(lambda r: r["f1_tuned"]["f1"]), "thresholds": [r["threshold"] for r in rows],
                "acc_error": mean(lambda r: r["f1"]["acc_error"] or 0.0),
                "acc_correct": mean(lambda r: r["f1"]["acc_correct"] or 0.0),
                "ece_checker": mean(lambda r: r["ece_vs_checker"]), "ece_mc": mean(lambda r: r["ece_vs_mc"])}
        table["prms"][name] = cell
        lines.append(f"| {name} | {cell['f1']:.3f} | {cell['acc_error']:.3f} / {cell['acc_correct']:.3f} | "
                     f"{cell['f1_tuned']:.3f} (at {', '.join(f'{t:g}' for t in cell['thresholds'])}) | "
                     f"{cell['ece_checker']:.3f} | {cell['ece_mc']:.3f} |")
    sizes = sorted({int(n) for s in seeds for n in results[s]["bon"]["majority"]})
    selectors = list(results[seeds[0]]["bon"])
    lines += ["", "| selector | " + " | ".join(f"N={n}" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for sel in selectors:
        accs = [sum(sum(results[s]["bon"][sel][str(n)].values()) for s in seeds)
                / sum(len(results[s]["bon"][sel][str(n)]) for s in seeds) for n in sizes]
        table["bon"][sel] = dict(zip(sizes, accs))
        lines.append(f"| {sel} | " + " | ".join(f"{100 * a:.1f}" for a in accs) + " |")
    top = str(sizes[-1])

    def per_task(sel):
        return {s: {k: [v, 1] for k, v in results[s]["bon"][sel][top].items()} for s in seeds}

    lines += ["", f"Paired differences at N = {top} (points, 95% CI over problems, seeds as strata):", ""]
    pairs = [("bce-soft/min", "majority"), ("bce-soft/min", "orm"), ("pqm/min", "majority"), ("pqm/min", "bce-soft/min"),
             ("orm", "majority"), ("majority", "random")]
    table["paired"] = {}
    for a, b in pairs:
        d = paired_difference(per_task(a), per_task(b))
        table["paired"][f"{a} - {b}"] = d
        lines.append(f"- {a} − {b}: {100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]")
    pi = sum(results[s]["pi_accuracy"] for s in seeds) / len(seeds)
    lines += ["", f"π's sampled accuracy (temperature 1): {100 * pi:.1f}%"]
    if beams:
        lines += beam_table(results, beams, seeds, args.beams, table)
    plot_reliability(results, seeds, out / "reliability.png")
    write_json(out / "summary.json", {**table, "pi_accuracy": pi, "seeds": seeds, "provenance": provenance(vars(args))})
    write_text(out / "report.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
