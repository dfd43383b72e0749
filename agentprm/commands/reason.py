"""`agentprm reason`: verifiable multi-step reasoning (agentprm/reason/, docs/reasoning.md).

    agentprm reason problems --split train --num 4000 --out train.jsonl      # generated chain arithmetic
    agentprm reason sft --problems train.jsonl --out reasoner                 # a tiny reasoner from worked solutions
    agentprm reason eval --model reasoner --problems eval.jsonl               # accuracy, and step errors if checkable
    agentprm reason rl --model reasoner --problems train.jsonl --eval-problems eval.jsonl --algo spro --out spro
    agentprm reason label --model reasoner --problems more.jsonl --out labels.parquet         # MC step labels
    agentprm reason prm --model reasoner --problems more.jsonl --data labels.parquet --out prm  # a step PRM
    agentprm reason eval --model reasoner --problems eval.jsonl --prm prm --samples 16 --temperature 1  # Best-of-16
    agentprm reason eval --model reasoner --problems eval.jsonl --prm prm --beam 4 4          # step-level beam search

`sft` and `rl` keep a checkpoint beside --out (--checkpoint-every-s): killed, the same command run again resumes.

A problems file is JSONL ("question", "answer", optional "id"): yours (GSM8K-style, judged by --checker) or
generated. Any Hugging Face causal LM folder works as --model (SFT: --model DIR)."""
from __future__ import annotations

from agentprm.commands.common import (add_checkpoint_flags, add_common, add_config_flags, add_device_flags,
                                      config_from_args, write_summary)
from agentprm.outputs import declare
from agentprm.reason.config import (AGGREGATIONS, ALGOS, STEP_LOSSES, ChainConfig, ReasonerConfig, ReasonRLConfig,
                                    StepPRMConfig)

CHECKER_HELP = "final-answer checker: numeric, exact, or module:function (default numeric)"


def register(sub) -> None:
    parser = sub.add_parser("reason", help="verifiable reasoning: problems, a reasoner, token-level process RL",
                            description=__doc__)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("problems", help="generate chain-arithmetic problems (JSONL)")
    p.add_argument("--out", required=True, metavar="FILE", help="problems file to write (JSONL)")
    p.add_argument("--split", required=True, choices=("train", "eval"), help="train or eval (never share a problem)")
    p.add_argument("--num", type=int, required=True, metavar="N", help="number of problems")
    add_config_flags(p, ChainConfig)
    add_common(p)
    declare(p, {"out": "file"})
    p.set_defaults(func=run_problems)

    p = actions.add_parser("sft", help="train a reasoner on worked solutions of chain problems")
    p.add_argument("--problems", required=True, metavar="FILE", help="chain problems (JSONL)")
    p.add_argument("--out", required=True, metavar="DIR", help="output model folder (replaced atomically)")
    add_config_flags(p, ReasonerConfig)
    add_device_flags(p)
    add_checkpoint_flags(p)
    add_common(p)
    declare(p, {"out": "model"}, inputs=("problems",))
    p.set_defaults(func=run_sft)

    p = actions.add_parser("eval", help="accuracy of a reasoner (and where its steps go wrong, on chain problems)")
    p.add_argument("--model", required=True, metavar="DIR", help="a reasoner or any HF causal LM folder")
    p.add_argument("--problems", required=True, metavar="FILE", help="problems (JSONL)")
    p.add_argument("--samples", type=int, default=1, metavar="N", help="solutions per problem (default 1)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--max-new-tokens", type=int, default=160, metavar="N", help="a solution's token budget")
    p.add_argument("--checker", default="numeric", metavar="NAME", help=CHECKER_HELP)
    p.add_argument("--out", metavar="FILE", help="also write every solution with its verdict (JSONL)")
    p.add_argument("--prm", metavar="DIR", help="a step PRM (`reason prm`): also pick one of each problem's samples "
                   "by its score (Best-of-N), or guide --beam")
    p.add_argument("--aggregate", default="min", choices=AGGREGATIONS, help="a solution's score from its step "
                   "scores (default min)")
    p.add_argument("--beam", type=int, nargs=2, metavar=("W", "K"), help="step-level beam search with --prm instead "
                   "of whole samples: width W, K sampled next lines per beam")
    add_device_flags(p)
    add_common(p)
    declare(p, {"out": "file"}, inputs=("model", "problems", "prm"))
    p.set_defaults(func=run_eval)

    p = actions.add_parser("label", help="Monte-Carlo step labels of a reasoner's own solutions (Parquet)")
    p.add_argument("--model", required=True, metavar="DIR", help="the policy whose solutions and completions label")
    p.add_argument("--problems", required=True, metavar="FILE", help="problems (JSONL): generated or yours")
    p.add_argument("--out", required=True, metavar="FILE", help="labelled solutions to write (.parquet)")
    p.add_argument("--samples", type=int, default=1, metavar="N", help="solutions labelled per problem (default 1)")
    p.add_argument("--k", type=int, default=8, metavar="K", help="completions from each step's prefix (default 8)")
    p.add_argument("--temperature", type=float, default=1.0, help="of the solutions and completions (default 1)")
    p.add_argument("--max-new-tokens", type=int, default=160, metavar="N", help="a solution's token budget")
    p.add_argument("--checker", default="numeric", metavar="NAME", help=CHECKER_HELP)
    add_device_flags(p)
    add_common(p)
    declare(p, {"out": "file"}, inputs=("model", "problems"))
    p.set_defaults(func=run_label)

    p = actions.add_parser("prm", help="train a step PRM on step labels")
    p.add_argument("--model", required=True, metavar="DIR", help="the backbone: the reasoner the labels came from")
    p.add_argument("--problems", required=True, metavar="FILE", help="the problems the labels were made from")
    p.add_argument("--data", required=True, metavar="FILE", help="labelled solutions (`reason label`, .parquet)")
    p.add_argument("--out", required=True, metavar="DIR", help="output step PRM folder (replaced atomically)")
    add_config_flags(p, StepPRMConfig, choices={"loss": STEP_LOSSES, "labels": ("soft", "hard")})
    add_device_flags(p)
    add_checkpoint_flags(p)
    add_common(p)
    declare(p, {"out": "model"}, inputs=("model", "problems", "data"))
    p.set_defaults(func=run_prm)

    p = actions.add_parser("rl", help="token-level process RL: SPRO, GRPO or PRIME")
    p.add_argument("--model", required=True, metavar="DIR", help="the initial policy (also SPRO's frozen π_ref)")
    p.add_argument("--problems", required=True, metavar="FILE", help="training problems (JSONL)")
    p.add_argument("--eval-problems", metavar="FILE", help="held-out problems for greedy accuracy during training")
    p.add_argument("--out", required=True, metavar="DIR", help="output model folder (replaced atomically)")
    p.add_argument("--checker", default="numeric", metavar="NAME", help=CHECKER_HELP)
    add_config_flags(p, ReasonRLConfig, choices={"algo": ALGOS})
    add_device_flags(p)
    add_checkpoint_flags(p)
    add_common(p)
    declare(p, {"out": "model"}, inputs=("model", "problems", "eval_problems"))
    p.set_defaults(func=run_rl)


def run_problems(args) -> int:
    from agentprm.reason.problems import chain_problems, write_problems

    cfg = config_from_args(ChainConfig, args)
    problems = chain_problems(args.split, args.num, args.seed, (cfg.min_steps, cfg.max_steps), cfg.digits, cfg.ops)
    write_problems(args.out, problems)
    print(f"{len(problems)} {args.split} problems -> {args.out}")
    write_summary(args, {"problems": len(problems), "split": args.split, "chain": vars(cfg), "out": args.out})
    return 0


def run_sft(args) -> int:
    from agentprm.errors import require
    from agentprm.reason.model import train_reasoner
    from agentprm.reason.problems import read_problems
    from agentprm.reason.solutions import solution_mix

    cfg = config_from_args(ReasonerConfig, args)
    problems = read_problems(args.problems)
    unchecked = next((p for p in problems if not p.checkable_steps), None)
    require(unchecked is None, f"--problems {args.problems}: problem {getattr(unchecked, 'id', '')!r} has no chain: "
            "worked solutions are written for chain problems only")
    pairs = solution_mix(problems, args.seed, cfg.per_problem, cfg.merge, cfg.noisy)
    _, _, metrics = train_reasoner(pairs, args.out, cfg, seed=args.seed)
    print(f"trained {metrics['steps']} steps on {metrics['examples']} solutions in {metrics['seconds']:.0f} s, "
          f"final loss {metrics['final_loss']:.3f}; wrote {args.out}")
    write_summary(args, {k: v for k, v in metrics.items() if k != "loss_curve"})
    return 0


def run_eval(args) -> int:
    import json
    from collections import Counter

    from agentprm.errors import require
    from agentprm.io import write_text
    from agentprm.reason.check import checker, final_answer, step_verdicts, steps
    from agentprm.reason.model import load_reasoner, sample
    from agentprm.reason.problems import read_problems

    require(args.samples >= 1, f"--samples must be >= 1 (got {args.samples})")
    require(args.beam is None or args.prm is not None, "--beam needs --prm: the step PRM that ranks the beams")
    require(args.beam is None or min(args.beam) >= 1, f"--beam W K must both be >= 1 (got {args.beam})")
    require(args.beam is None or args.temperature > 0,
            "--beam samples K next lines of each beam: give --temperature > 0 (e.g. 1)")
    check = checker(args.checker)
    problems = read_problems(args.problems)
    score = None
    if args.prm:
        from agentprm.reason.search import prm_scorer
        from agentprm.reason.step_prm import StepPRM

        score = prm_scorer(StepPRM.load(args.prm), args.aggregate)
    model, tokenizer = load_reasoner(args.model)
    if args.beam:
        from agentprm.reason.search import StepSampler, step_beam

        found = step_beam(StepSampler(model, tokenizer, args.temperature), score, problems, *args.beam, seed=args.seed)
        texts = [[r.solution] for r in found]
    else:
        texts = sample(model, tokenizer, problems, args.samples, args.temperature, args.seed, args.max_new_tokens)
    rows, right, majority, clean, picked = [], 0, 0, 0, 0
    for problem, solutions in zip(problems, texts):
        ok = [check(problem, s) for s in solutions]
        right += sum(ok)
        votes = Counter(a for a in (final_answer(s) for s in solutions) if a is not None)
        if votes:
            top = votes.most_common(1)[0][0]
            majority += check(problem, f"Answer: {top}")
        if score is not None and not args.beam:
            scores = score([problem] * len(solutions), [tuple(steps(s)) for s in solutions])
            picked += ok[max(range(len(ok)), key=scores.__getitem__)]
        for s, good in zip(solutions, ok):
            row = {"id": problem.id, "solution": s, "correct": good}
            if problem.checkable_steps:
                row["first_error"] = step_verdicts(problem, s).first_error
                clean += row["first_error"] is None
            rows.append(row)
    n = sum(len(t) for t in texts)
    summary = {"problems": len(problems), "samples": 1 if args.beam else args.samples, "accuracy": round(right / n, 4),
               "majority_accuracy": round(majority / len(problems), 4)}
    if score is not None and not args.beam:
        summary["prm_best_of_n_accuracy"] = round(picked / len(problems), 4)
    if args.beam:
        summary["beam"] = {"width": args.beam[0], "expand": args.beam[1], "aggregate": args.aggregate,
                           "tokens_per_problem": round(sum(r.tokens for r in found) / len(found), 1)}
    if any(p.checkable_steps for p in problems):
        summary["clean_steps"] = round(clean / sum(1 for r in rows if "first_error" in r), 4)
    if args.out:
        write_text(args.out, "".join(json.dumps(r) + "\n" for r in rows))
    print(" ".join(f"{k} {v}" for k, v in summary.items()))
    write_summary(args, summary)
    return 0


def run_label(args) -> int:
    from agentprm.errors import require
    from agentprm.reason.check import checker
    from agentprm.reason.labels import label_solutions, write_step_labels
    from agentprm.reason.model import HFCompleter, load_reasoner, sample
    from agentprm.reason.problems import read_problems

    require(args.samples >= 1 and args.k >= 1, f"--samples and --k must be >= 1 (got {args.samples}, {args.k})")
    check = checker(args.checker)
    problems = read_problems(args.problems)
    model, tokenizer = load_reasoner(args.model)
    texts = sample(model, tokenizer, problems, args.samples, args.temperature, args.seed, args.max_new_tokens)
    flat = [(p, s) for p, ss in zip(problems, texts) for s in ss]
    completer = HFCompleter(model, tokenizer, args.temperature, args.max_new_tokens)
    examples = label_solutions([p for p, _ in flat], [s for _, s in flat], completer, args.k, check, args.seed + 1)
    require(bool(examples), f"--model {args.model}: no solution with a line to label")
    write_step_labels(args.out, examples, {"k": args.k, "model": str(args.model), "problems": str(args.problems),
                                           "samples": args.samples, "temperature": args.temperature,
                                           "checker": args.checker, "seed": args.seed})
    summary = {"solutions": len(examples), "right": round(sum(e.outcome for e in examples) / len(examples), 4),
               "mean_steps": round(sum(len(e.lines) for e in examples) / len(examples), 2),
               "mean_soft": round(sum(sum(e.soft) for e in examples) / sum(len(e.soft) for e in examples), 4),
               "out": args.out}
    print(" ".join(f"{k} {v}" for k, v in summary.items()))
    write_summary(args, summary)
    return 0


def run_prm(args) -> int:
    from agentprm.reason.labels import read_step_labels
    from agentprm.reason.problems import read_problems
    from agentprm.reason.step_prm import StepPRM, train_step_prm

    cfg = config_from_args(StepPRMConfig, args)
    cfg.check()
    examples = read_step_labels(args.data, read_problems(args.problems))
    prm = StepPRM.from_reasoner(args.model, seed=args.seed)
    curve = train_step_prm(prm, examples, cfg, seed=args.seed, progress=True)
    prm.save(args.out, config=vars(cfg), seed=args.seed, data=str(args.data), backbone=str(args.model),
             loss_curve=curve)
    print(f"step PRM ({cfg.loss}) trained {curve[-1]['step']} steps on {len(examples)} solutions, final loss "
          f"{curve[-1]['loss']:.4f}; wrote {args.out}")
    write_summary(args, {"solutions": len(examples), "steps": curve[-1]["step"], "final_loss": curve[-1]["loss"]})
    return 0


def run_rl(args) -> int:
    from agentprm.io import write_json
    from agentprm.models.lora import add_lora, save_trained
    from agentprm.outputs import atomic_dir
    from agentprm.reason.check import checker
    from agentprm.train.config import check_lora
    from agentprm.reason.model import load_reasoner
    from agentprm.reason.problems import read_problems
    from agentprm.reason.rl import train_rl

    cfg = config_from_args(ReasonRLConfig, args)
    cfg.check()
    if cfg.lora.r:
        check_lora(cfg.lora)
    check = checker(args.checker)
    problems = read_problems(args.problems)
    held_out = read_problems(args.eval_problems) if args.eval_problems else []
    model, tokenizer = load_reasoner(args.model)
    if cfg.lora.r:
        model = add_lora(model, cfg.lora, seed=args.seed)

    def show(row: dict) -> None:
        print(" ".join(f"{k} {v}" for k, v in row.items()), flush=True)

    rows = train_rl(model, tokenizer, problems, cfg, check, held_out, seed=args.seed, on_log=show)
    with atomic_dir(args.out) as tmp:
        save_trained(model, tmp, cfg.lora.merge, what="reasoner")
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "agentprm.json", {"reason_rl": {"config": vars(cfg), "seed": args.seed, "log": rows}})
    print(f"{cfg.algo}: {len(rows)} steps in {rows[-1]['seconds']:.0f} s; wrote {args.out}")
    write_summary(args, {"algo": cfg.algo, "steps": len(rows), "log": rows})
    return 0
