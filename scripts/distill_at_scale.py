"""π1 by distilling Best-of-4 with a large-regime critic: expert iteration at 1,000+ train games (the
target π1 − π0 ≥ +5), beside the same update with a uniform critic (rejection fine-tuning on π0's
own samples: the control) and with π0's own log π as the critic (the critic-free reference).

    python scripts/distill_at_scale.py --train runs/bench-iteration-12k/n12000/tasks/train --games 1000 \
        --tasks runs/eval216-s1 --curve runs/curve --out runs/distill30k --seeds 0 1 2 \
        --critic q12k=runs/prm-30k/bt-prior-12k-s{seed} --layout runs/prm-30k/layout-3000.json \
        --rows uniform logpi0+layout q12k+layout

Each row and seed is three CLI commands (printed as they run): the search, `agentprm eval --best-of 4` of π0 at
T 0.7 with the row's critic on the first --games train games, writing its episodes; `agentprm sft` of π0 on the won
ones (the beam-distill recipe of docs/results.md: 300 steps of 16 at lr 1e-4, no renumbered copies); `agentprm eval`
of that π1, greedy, on the eval games. A row is `uniform`, `logpi0` (π0's log π, `--prm policy`) or a `--critic`
NAME, each optionally `+layout` (the layout prior, w chosen per critic and seed on the curve's held-out states as
scripts/bon_at_scale.py chooses it; the search's own per-state rankings, so the prior can be learned only through
the episodes it wins). The first row is the control every other row is paired with, besides greedy π0. Steps done
are kept (resumable); the tables are printed and kept in <out>/distill.json (with provenance), each summary at
<out>/<row>/seed<s>/evals/<search|pi1>.json (scripts/paired_rows.py reads them). `--keep better` distils those
searches' episodes that beat greedy π0's own episode of the game (played once on the train games) into π1s of its
own, <out>/<row>/seed<s>/better/, its tables in <out>/distill-better.json; `--keep best` those and greedy π0's own won
episode of every other game (<out>/<row>/seed<s>/best/); `--keep best --copies K` writes the search's corrections K
times beside π0's one (<out>/<row>/seed<s>/best-xK/, <out>/distill-best-xK.json): between the two, the corrections at
K times the anchor's weight per episode. `--sft-steps N` (default 300) trains each π1 for N steps instead, in a folder
of its own (<recipe>-sN, except 300 for `won`, which has no folder): more passes over the same demos.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from agentprm.data.trajectories import EpisodeRecord, iter_episodes, read_trajectories, write_episodes_file
from agentprm.envs.alfworld.tasks import MANIFEST, load_tasks
from agentprm.errors import UserError
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.io import provenance, write_json, write_text
from agentprm.outputs import check_output_file

sys.path.insert(0, str(Path(__file__).parent))
from bon_at_scale import POLICY, cli as run, critic_folders, heldout_layout, layout_weight  # noqa: E402

SFT = ("--model", POLICY, "--batch-size", "16", "--lr", "1e-4", "--renumber-copies", "0", "--val-frac", "0")   # and --steps


def first_games(train: Path, games: int, out: Path) -> Path:
    """A task folder of the first `games` of `train` (hard links: a game must sit inside its tasks folder); one made
    before is reused only if it lists the same games (a rerun with another --train or --games is refused)."""
    lines = (train / MANIFEST).read_text().splitlines()[:games]
    if len(lines) < games:
        raise SystemExit(f"--games {games}: {train / MANIFEST} lists {len(lines)}")
    if (out / MANIFEST).exists():
        if (out / MANIFEST).read_text().splitlines() != lines:
            raise SystemExit(f"{out}: made from other games than the first {games} of {train}; "
                             "give another --out or move it away")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))   # a new name: nothing there is replaced
    for line in lines:
        game = json.loads(line)["game"]
        shutil.copytree(train / game, tmp / game, copy_function=os.link)
    write_text(tmp / MANIFEST, "\n".join(lines) + "\n")
    tmp.rename(out)
    return out


def better(search: list[EpisodeRecord], greedy: list[EpisodeRecord]) -> list[EpisodeRecord]:
    """The search episodes that beat greedy π0's own episode of their game: won where it lost, or won in fewer
    turns — what the search knows that π0 does not (a game greedy π0 did not play is left out)."""
    own = {e.task_id: e for e in greedy}
    return [e for e in search if e.won and not e.error and e.task_id in own
            and (not own[e.task_id].won or len(e.steps) < len(own[e.task_id].steps))]


def best(search: list[EpisodeRecord], greedy: list[EpisodeRecord], copies: int = 1) -> list[EpisodeRecord]:
    """Per game the better of the search's episode and greedy π0's: the search's where it beat greedy (`better`),
    else greedy π0's own where it won — the search's corrections, and π0's argmax kept everywhere else. `copies`
    writes each correction that many times (renamed: an episode is its id's rows), so SFT weighs it K to 1."""
    improved = better(search, greedy)
    taken = {e.task_id for e in improved}
    copied = [e if k == 0 else replace(e, episode_id=f"{e.episode_id}-x{k}") for e in improved for k in range(copies)]
    return copied + [e for e in greedy if e.won and not e.error and e.task_id not in taken]


KEEP = {"won": None, "better": better, "best": best}   # --keep: what π1 imitates besides every won search episode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=Path, required=True, help="the train games (a generated task folder)")
    ap.add_argument("--games", type=int, default=1000, help="search on the first this-many of them (default 1000)")
    ap.add_argument("--tasks", type=Path, required=True, help="eval games (none of them a train game)")
    ap.add_argument("--curve", type=Path, help="scripts/critic_curve.py's --out (held-out states: the layout's w)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--critic", action="append", default=[], metavar="NAME=FOLDER",
                    help="a PRM folder per seed, {seed} in it replaced; repeatable")
    ap.add_argument("--layout", type=Path, help="`agentprm tasks layout` of the train games (rows NAME+layout)")
    ap.add_argument("--rows", nargs="+", default=["uniform", "logpi0+layout"],
                    help="uniform | logpi0 | a --critic NAME, each optionally +layout; the first is the control")
    ap.add_argument("--keep", choices=tuple(KEEP), default="won",
                    help="what π1 imitates: every won search episode (default); better: those that beat greedy "
                         "π0's episode of the same game (won where it lost, or in fewer turns); best: those, and "
                         "greedy π0's own won episode of every other game (the searches are shared)")
    ap.add_argument("--copies", type=int, default=1, metavar="K",
                    help="with --keep best: each of the search's corrections written K times (default 1)")
    ap.add_argument("--sft-steps", type=int, default=300, metavar="N",
                    help="SFT steps of 16 demo steps for each π1 (default 300, the beam-distill recipe)")
    ap.add_argument("--overwrite", action="store_true", help="replace a distill.json in --out agentprm did not write")
    args = ap.parse_args()
    critics = {"uniform": "uniform", "logpi0": "policy", **critic_folders(args.critic, args.seeds)}
    for row in args.rows:   # every row and file checked before anything is played
        name, _, extra = row.partition("+")
        if name not in critics or extra not in ("", "layout") or (extra and name == "uniform"):
            raise SystemExit(f"--rows {row}: expected uniform, logpi0 or one of --critic's names, "
                             "the last two optionally +layout")
        if extra and not (args.layout and args.curve):
            raise SystemExit(f"--rows {row}: +layout needs --layout and --curve")
    if args.copies < 1 or (args.copies > 1 and args.keep != "best"):
        raise SystemExit(f"--copies {args.copies}: expected a count >= 1, above 1 only with --keep best")
    if args.sft_steps < 1 or (args.sft_steps != 300 and args.keep == "won"):
        raise SystemExit(f"--sft-steps {args.sft_steps}: expected a count >= 1, other than 300 only with --keep")
    recipe = args.keep + (f"-x{args.copies}" if args.copies > 1 else "") + \
        (f"-s{args.sft_steps}" if args.sft_steps != 300 else "")   # its folder and results file
    results = args.out / ("distill.json" if args.keep == "won" else f"distill-{recipe}.json")
    try:
        check_output_file(results, "--out ", args.overwrite)
        load_tasks(args.tasks)
        load_tasks(args.train)
    except UserError as e:
        raise SystemExit(str(e))
    train = first_games(args.train, args.games, args.out / f"train{args.games}")
    held = heldout_layout(args.curve, args.layout) if any(r.endswith("+layout") for r in args.rows) else None
    if args.keep != "won":   # greedy π0 on the train games: deterministic, one play serves every seed
        run(args.out / "pi0" / "train.json", "eval", "--policy", POLICY, "--tasks", str(train), "--episodes",
            str(args.out / "pi0" / "train.parquet"))
        greedy = list(iter_episodes(read_trajectories(args.out / "pi0" / "train.parquet")))
    rows: dict[str, dict[int, dict]] = {"pi0 (greedy)": {}}
    search: dict[str, dict[int, dict]] = {}
    for seed in args.seeds:
        rows["pi0 (greedy)"][seed] = run(args.out / "pi0" / f"seed{seed}" / "evals" / "pi1.json", "eval", "--policy",
                                         POLICY, "--tasks", str(args.tasks), "--seed", str(seed))
        for row in args.rows:
            name, _, extra = row.partition("+")
            folder, at = critics[name].format(seed=seed), args.out / row / f"seed{seed}"
            flags = ["--prm", folder]
            if extra:
                w = layout_weight(args.out / "weights" / f"{name}-s{seed}.json", folder, held)
                flags += ["--layout", str(args.layout), "--layout-weight", f"{w:g}"]
            search.setdefault(row, {})[seed] = run(
                at / "evals" / "search.json", "eval", "--policy", POLICY, "--tasks", str(train), "--seed", str(seed),
                "--temperature", "0.7", "--best-of", "4", *flags, "--episodes", str(at / "search.parquet"))
            demos = searched = at / "search.parquet"
            if args.keep != "won":   # the same search, its episodes filtered: a recipe beside the first
                at, demos = at / recipe, at / recipe / "demos.parquet"
                if not demos.exists():
                    episodes = list(iter_episodes(read_trajectories(searched)))
                    write_episodes_file(demos, best(episodes, greedy, args.copies) if args.keep == "best"
                                        else KEEP[args.keep](episodes, greedy))
            run(at / "sft.json", "sft", "--demos", str(demos), *SFT, "--steps", str(args.sft_steps),
                "--seed", str(seed), "--out", str(at / "pi1"))
            rows.setdefault(f"π1 from {row}", {})[seed] = run(at / "evals" / "pi1.json", "eval", "--policy",
                                                              str(at / "pi1"), "--tasks", str(args.tasks),
                                                              "--seed", str(seed))
    side = lambda row: {s: rows[row][s]["per_task"] for s in rows[row]}  # noqa: E731
    names = list(rows)
    pairs = [(row, "pi0 (greedy)") for row in names[1:]] + [(row, names[1]) for row in names[2:]]
    comps = [{"a": a, "b": b, **paired_difference(side(a), side(b))} for a, b in pairs]
    rate = lambda r: ", ".join(f"{100 * r[s]['success_rate']:.1f}" for s in args.seeds)  # noqa: E731
    lines = [f"Seeds {', '.join(map(str, args.seeds))}; search on the first {args.games} games of {args.train}; "
             f"π1 imitates the {recipe} search episodes; eval games {args.tasks}.", "",
             "| row | success % per seed (eval) | its search on the train games, success % per seed |", "|---|---|---|"]
    lines += [f"| {row} | {rate(r)} | {rate(search[row.removeprefix('π1 from ')]) if row != names[0] else ''} |"
              for row, r in rows.items()]
    lines += ["", comparisons_table(comps)]
    text = "\n".join(lines) + "\n"
    write_json(results, {"table": text, "rows": {row: {s: r[s]["success_rate"] for s in r} for row, r in rows.items()},
                         "search": {row: {s: r[s]["success_rate"] for s in r} for row, r in search.items()},
                         "comparisons": comps, "provenance": provenance(vars(args))})
    print(text)


if __name__ == "__main__":
    main()
