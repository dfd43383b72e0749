"""Best-of-4 with critics trained at the large regime, beside greedy π0 and the uniform-critic control, paired over
the same eval games and seeds (the Best-of-4 target).

    python scripts/bon_at_scale.py --curve runs/curve --tasks runs/eval216-s1 --out runs/bon30k --seeds 0 1 2 \
        --critic q12k=runs/prm-30k/bt-prior-12k-s{seed} --critic q30k=runs/prm-30k/bt-prior-30k-s{seed} \
        --layout runs/prm-30k/layout-3000.json

Every row is one `agentprm eval` command (printed as it runs), π0 sampling 4 replies at T 0.7 with the seed, the
same samples for every critic of a seed: greedy π0, Best-of-4 ranked by a uniform critic (the control), by π0's
own log π (`logpi0`: `--prm policy`, the critic-free reference), by each `--critic NAME=FOLDER` (`{seed}` in
FOLDER is the seed: the critic of seed s plays eval seed s), and with `--layout` by each of them plus the layout
prior (`logit Q + w·f`, agentprm/search/layout.py), w chosen per critic and seed from scripts/informed_critic.py's
grid on the curve's held-out states (whose games none of the eval games is). Rows already played are kept (the
command is resumable); the tables are printed and kept in <out>/bon.json (with provenance; a file there agentprm did
not write is refused before any play), each row's summary at <out>/<row>/seed<s>/evals/<greedy|bon4>.json, the
layout scripts/paired_rows.py reads.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from agentprm.errors import UserError
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.io import provenance, write_json
from agentprm.outputs import check_output_file
from agentprm.prm.loading import load_prm
from agentprm.search.layout import LayoutPrior
from agentprm.search.policy import PolicyCritic

sys.path.insert(0, str(Path(__file__).parent))
from critic_curve import load_heldout  # noqa: E402  (the study's sibling scripts)
from informed_critic import choose_weight  # noqa: E402

POLICY = "agentprm/assets/policy"
AGENTPRM = [sys.executable, "-m", "agentprm"]   # the CLI of this interpreter's agentprm


def cli(summary: Path, *command: str) -> dict:
    """One `agentprm` command (printed as it runs) writing its summary to `summary` (--json), skipped where that
    exists: what makes these studies resumable."""
    if not summary.exists():
        summary.parent.mkdir(parents=True, exist_ok=True)
        command = (*AGENTPRM, *command, "--json", str(summary))
        print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads(summary.read_text())


def play(out: Path, row: str, seed: int, tasks: Path, *flags: str) -> dict:
    """One eval row of one seed through the CLI, skipped where its summary exists."""
    path = out / row / f"seed{seed}" / "evals" / ("greedy.json" if not flags else "bon4.json")
    return cli(path, "eval", "--policy", POLICY, "--tasks", str(tasks), "--seed", str(seed), *flags)


def critic_folders(specs: list[str], seeds: list[int]) -> dict[str, str]:
    """--critic NAME=FOLDER flags as {NAME: FOLDER}, each seed's folder ({seed} in FOLDER replaced) checked before
    anything is played."""
    critics = {}
    for spec in specs:
        name, sep, pattern = spec.partition("=")
        if not sep or not name or not pattern:
            raise SystemExit(f"--critic {spec}: expected NAME=FOLDER")
        for seed in seeds:
            if not Path(pattern.format(seed=seed)).is_dir():
                raise SystemExit(f"--critic {name}: {pattern.format(seed=seed)} is not a folder")
        critics[name] = pattern
    return critics


def heldout_layout(curve: Path, layout: Path) -> tuple:
    """The curve's held-out states, their commands and oracle labels, and the layout prior's f of each command."""
    prior = LayoutPrior.load(layout)
    states, actions, truth = load_heldout(curve / "heldout")
    return states, actions, truth, [s.key() for s in states], np.array([prior.advantage(s, a)
                                                                         for s, a in zip(states, actions)])


def layout_weight(fit_file: Path, folder: str, held: tuple) -> float:
    """The layout prior's w for the critic in `folder` ('policy': π0's log π), chosen on the held-out states by
    informed_critic.py's grid; kept in `fit_file` and read from it when there."""
    if not fit_file.exists():
        states, actions, truth, keys, f = held
        critic = PolicyCritic(POLICY) if folder == "policy" else load_prm(folder)
        write_json(fit_file, choose_weight(critic.logits(states, actions).numpy(), f, truth, keys))
    return json.loads(fit_file.read_text())["weight"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--curve", type=Path, required=True, help="scripts/critic_curve.py's --out (held-out states)")
    ap.add_argument("--tasks", type=Path, required=True, help="eval games (none of the held-out states' games)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--critic", action="append", required=True, metavar="NAME=FOLDER",
                    help="a PRM folder per seed, {seed} in it replaced; repeatable")
    ap.add_argument("--overwrite", action="store_true", help="replace a bon.json in --out that agentprm did not write")
    ap.add_argument("--layout", type=Path, help="`agentprm tasks layout` of the train games: adds NAME+layout rows")
    args = ap.parse_args()
    critics = {"logpi0": "policy", **critic_folders(args.critic, args.seeds)}
    results = args.out / "bon.json"
    try:
        check_output_file(results, "--out ", args.overwrite)
    except UserError as e:
        raise SystemExit(str(e))
    held = heldout_layout(args.curve, args.layout) if args.layout else None
    bon = ("--temperature", "0.7", "--best-of", "4")
    rows: dict[str, dict[int, dict]] = {}
    weights: dict[str, float] = {}
    for seed in args.seeds:
        rows.setdefault("pi0 (greedy)", {})[seed] = play(args.out, "pi0", seed, args.tasks)
        rows.setdefault("Best-of-4, uniform critic", {})[seed] = play(args.out, "uniform", seed, args.tasks, *bon,
                                                                      "--prm", "uniform")
        for name, pattern in critics.items():
            folder = pattern.format(seed=seed)
            rows.setdefault(f"Best-of-4, {name}", {})[seed] = play(args.out, name, seed, args.tasks, *bon,
                                                                   "--prm", folder)
            if held:
                w = weights[f"{name} s{seed}"] = layout_weight(args.out / "weights" / f"{name}-s{seed}.json",
                                                               folder, held)
                rows.setdefault(f"Best-of-4, {name} + layout", {})[seed] = play(
                    args.out, f"{name}-layout", seed, args.tasks, *bon, "--prm", folder, "--layout", str(args.layout),
                    "--layout-weight", f"{w:g}")
    side = lambda row: {s: rows[row][s]["per_task"] for s in rows[row]}  # noqa: E731
    pairs = [(row, base) for row in list(rows)[1:] for base in ("pi0 (greedy)", "Best-of-4, uniform critic")
             if row != base]
    pairs += [(row, "Best-of-4, logpi0 + layout") for row in rows if row.endswith("+ layout") and "logpi0" not in row]
    comps = [{"a": a, "b": b, **paired_difference(side(a), side(b))} for a, b in pairs]
    lines = [f"Seeds {', '.join(map(str, args.seeds))}; eval games {args.tasks}.", "",
             "| row | success % per seed |", "|---|---|"]
    rate = lambda r: ", ".join(f"{100 * r[s]['success_rate']:.1f}" for s in args.seeds)  # noqa: E731
    lines += [f"| {row} | {rate(r)} |" for row, r in rows.items()]
    lines += ["", comparisons_table(comps)]
    if weights:
        lines += ["", "Layout weight w chosen on the held-out states: "
                  + ", ".join(f"{k} {v:g}" for k, v in weights.items())]
    text = "\n".join(lines) + "\n"
    write_json(results, {"table": text, "rows": {row: {s: r[s]["success_rate"] for s in r} for row, r in rows.items()},
                         "comparisons": comps, "weights": weights, "provenance": provenance(vars(args))})
    print(text)


if __name__ == "__main__":
    main()
