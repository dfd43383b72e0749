"""π0 vs number of demonstrations, over seeds, and success vs training time: the measurements behind π0's row.

    python scripts/pi0_study.py --work /tmp/pi0-study        # 3 sizes x 3 seeds, ~3.5 h on 2 cores (see below)
    python scripts/pi0_study.py --work W --sizes 24 48 --seeds 0 --epochs 0.2 --eval-games 6   # smoke run

Same recipe as scripts/build_default_policy.py (generated train games -> expert demos -> `agentprm sft` ->
`agentprm eval` on held-out floor plans), with the training demos cut to the first N train games. Every
(size, seed) run trains for the same number of steps (more epochs on fewer games) with its own seed (init,
example order, augmentation); the runs of the largest size also save checkpoints (`--checkpoint-every` steps)
that are evaluated for the success-vs-training-time curve. Step counts, not seconds, fix each run, so results
do not depend on the machine.
Runs go `--parallel` at a time, one torch thread each. Finished runs are skipped when rerun (resumable).
Writes <work>/study.json, <work>/study.md and <work>/study.png. Cost: 9 runs of the shipped 6,150 steps, 2 at a
time on 1 thread each (tiny preset: 2.9 steps/s measured for one run on a free core, less with two), ~40 min
a run, plus ~2 min per eval.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib.pyplot as plt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentprm.cli import run_command
from agentprm.data.summary import per_seed_cell, pooled_rows, rate_cells
from agentprm.io import atomic_path, provenance, write_json, write_text
from agentprm.loop.report import errorbar_ci, save_png
from build_default_policy import SETTINGS, games


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, required=True, help="folder for games, demos and runs (reused when rerun)")
    p.add_argument("--sizes", type=int, nargs="+", default=[120, 240, 480], help="train games per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    p.add_argument("--model", default=SETTINGS["full"]["model"])
    p.add_argument("--epochs", type=float, default=SETTINGS["full"]["epochs"],
                   help="epochs at the largest size; smaller sizes get proportionally more, so every run trains the "
                   "same number of steps (equal compute, only the data differ)")
    p.add_argument("--time-budget", type=float, default=SETTINGS["full"]["time_budget"],
                   help="SFT seconds per run (0 = none)")
    p.add_argument("--checkpoint-every", type=int, default=750, help="checkpoint interval (steps) for the largest "
                   "size's runs (default 750)")
    p.add_argument("--renumber-copies", type=int, default=SETTINGS["full"]["renumber_copies"])
    p.add_argument("--eval-games", type=int, default=SETTINGS["full"]["eval_games"])
    p.add_argument("--parallel", type=int, default=2, help="runs at a time (default 2)")
    p.add_argument("--game-seed", type=int, default=0, help="seed of the generated games (fixed across runs)")
    p.add_argument("--workers", type=int, default=2, help="processes for game generation and demos")
    return p.parse_args(argv)


def subset_demos(demos: Path, size: int, work: Path) -> Path:
    """The demos of the first `size` train games (task ids in order; ids start with the game's index)."""
    out = work / f"demos-first{size}.parquet"
    if not out.exists():
        table = pq.read_table(demos)
        ids = sorted(set(table["task_id"].to_pylist()))[:size]
        with atomic_path(out) as tmp:
            pq.write_table(table.filter(pc.is_in(table["task_id"], value_set=pa.array(ids))), tmp)
    return out


def run_one(args, demos: Path, held_out: Path, size: int, seed: int, checkpoint_every: int) -> None:
    run = args.work / "runs" / f"n{size}-s{seed}"
    if not (run / "eval.json").exists():
        epochs = args.epochs * max(args.sizes) / size
        run_command("sft", "--demos", demos, "--out", run, "--model", args.model, "--epochs", epochs,
                    "--time-budget", args.time_budget, "--seed", seed, "--renumber-copies", args.renumber_copies,
                    "--checkpoint-every", checkpoint_every, "--threads", 1, "--val-frac", 0, quiet=True)
        run_command("eval", "--policy", run, "--tasks", held_out, "--seed", seed, "--workers", 1,
                    "--json", run / "eval.json", quiet=True)
    for ckpt in sorted((run.parent / f"{run.name}-checkpoints").glob("step-*")):
        if not (ckpt / "eval.json").exists():
            run_command("eval", "--policy", ckpt, "--tasks", held_out, "--seed", seed, "--workers", 1,
                        "--json", ckpt / "eval.json", quiet=True)


def collect(args) -> dict:
    """Per-run rows, seeds pooled per size, and the checkpoint curve (seeds pooled per step)."""
    runs, by_seed, curve = [], defaultdict(list), defaultdict(list)
    for size in args.sizes:
        for seed in args.seeds:
            run = args.work / "runs" / f"n{size}-s{seed}"
            ev = json.loads((run / "eval.json").read_text())
            sft = json.loads((run / "agentprm.json").read_text())["sft"]["metrics"]
            row = {"size": size, "seed": seed, "success_rate": ev["success_rate"], "ci95": ev["ci95"],
                   "episodes": ev["episodes"], "examples": sft["examples"], "steps": sft["steps"],
                   "train_seconds": sft["train_seconds"], "final_loss": sft["final_loss"]}
            runs.append(row)
            by_seed[seed].append(row)
            checkpoints = run.parent / f"{run.name}-checkpoints"
            steps = set()
            for ckpt in sorted(checkpoints.glob("step-*")):
                c, step = json.loads((ckpt / "eval.json").read_text()), int(ckpt.name[5:])
                steps.add(step)
                curve[seed].append({"step": step, "success_rate": c["success_rate"],
                                    "episodes": c["episodes"]})
            if steps and sft["steps"] not in steps:  # the final model, unless also saved as the last checkpoint
                curve[seed].append({"step": sft["steps"], "success_rate": ev["success_rate"],
                                    "episodes": ev["episodes"]})
    return {"runs": runs, "by_size": sorted(pooled_rows(by_seed, key=("size",)), key=lambda r: r["size"]),
            "curve": sorted(pooled_rows(curve, key=("step",)), key=lambda r: r["step"])}


def markdown(study: dict, args, expert: dict) -> str:
    secs = [r["train_seconds"] / r["steps"] for r in study["runs"]]
    lines = [f"Model `{args.model}`, {args.epochs} epochs at {max(args.sizes)} games (same steps for all sizes), "
             f"{args.renumber_copies} renumbered copies, seeds {args.seeds}, {args.eval_games} held-out games per "
             "eval, 50-step budget; success pooled over seeds (Wilson 95% CI). Training took "
             f"{min(secs):.2f}-{max(secs):.2f} s/step (1 thread, 2 runs at a time).", "",
             "| train games | SFT examples | success % | 95% CI | episodes | per seed % |", "|---|---|---|---|---|---|"]
    examples = {r["size"]: r["examples"] for r in study["runs"]}
    lines += [f"| {r['size']} | {examples[r['size']]} | {rate_cells(r)} | {per_seed_cell(r)} |"
              for r in study["by_size"]]
    lines.append(f"| expert (ceiling) | | {rate_cells(expert)} | |")
    if study["curve"]:
        lines += ["", f"Success vs SFT steps ({max(args.sizes)} games, checkpoints of each seed's run):", "",
                  "| SFT steps | success % | 95% CI | episodes |", "|---|---|---|---|"]
        lines += [f"| {r['step']} | {rate_cells(r)} |" for r in study["curve"]]
    return "\n".join(lines) + "\n"


def plot(study: dict, expert: dict, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, rows, key, label in ((axes[0], study["by_size"], "size", "train games (demos)"),
                                 (axes[1], study["curve"], "step", "SFT steps (batch 16)")):
        if not rows:
            ax.set_visible(False)
            continue
        errorbar_ci(ax, [r[key] for r in rows], rows, label="π0 (pooled over seeds)")
        ax.axhline(100 * expert["success_rate"], color="gray", linestyle="--", label="expert")
        ax.set(xlabel=label, ylabel="held-out success % (95% CI)", ylim=(0, 100))
        ax.legend(fontsize=8)
    save_png(fig, path)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.seed = args.game_seed  # the games/demos helpers of build_default_policy read args.seed
    held_out = games(args.work, "eval", args.eval_games, args)
    demos = args.work / f"demos-train-{max(args.sizes)}-s{args.game_seed}.parquet"  # build_default_policy's name
    if not demos.exists():
        train = games(args.work, "train", max(args.sizes), args)
        run_command("demos", "--tasks", train, "--out", demos, "--workers", args.workers, "--seed", args.game_seed)
    expert_json = args.work / "expert-eval.json"
    if not expert_json.exists():
        run_command("eval", "--policy", "expert", "--tasks", held_out, "--seed", args.game_seed,
                    "--workers", args.workers, "--json", expert_json)
    jobs = [(subset_demos(demos, size, args.work), size, seed, args.checkpoint_every if size == max(args.sizes) else 0)
            for size in sorted(args.sizes, reverse=True) for seed in args.seeds]  # the largest (π0's) first
    with ThreadPoolExecutor(args.parallel) as pool_:
        for f in [pool_.submit(run_one, args, d, held_out, size, seed, ck) for d, size, seed, ck in jobs]:
            f.result()
    study, expert = collect(args), json.loads(expert_json.read_text())
    study["expert"] = {k: expert[k] for k in ("success_rate", "ci95", "episodes")}
    study["provenance"] = provenance({k: str(v) for k, v in vars(args).items()}, args.game_seed)
    write_json(args.work / "study.json", study)
    text = markdown(study, args, expert)
    write_text(args.work / "study.md", text)
    plot(study, expert, args.work / "study.png")
    print(text)


if __name__ == "__main__":  # env workers start by re-importing this file
    main()
