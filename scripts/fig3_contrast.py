"""The paper's Fig. 3 contrast from a finished `configs/sweeps/fig3.yaml` sweep: at each rollout budget, the PRM
score of π_θ's greedy replies (what the policy update climbs) beside π_θ's true success over the update's steps,
and the reward-hacking detector's verdict.

    python scripts/sweep.py --config configs/sweeps/fig3.yaml --seeds 0 1 2 --out runs/fig3
    python scripts/fig3_contrast.py --sweep runs/fig3 [--plot docs/img/fig3-contrast.png]

Per budget and seed, from the detector's checks (iter_1/policy/agentprm.json, `online_dpo.hacking.checks`; step 0 is
π0 itself): the PRM score's rise from step 0 to the last check (mean Q1 of π_θ's greedy replies on held-out monitor
states), probe success at step 0 and at the last check (π_θ's greedy success on the same train tasks at every check),
the first alarm; per budget, π1 − π0 over the eval games, paired over seeds from each run's `results.json`. The
figure's claim, "the PRM score rises while success falls", is read off the paired eval difference, not the probe
(24 episodes a check). A variant whose update used `policy.critic: uniform` (seeded random scores, the detector
off) is the control: the same update with a critic that knows nothing. Its π1 − π0 is reported, and every budget's
π1 against it — whether the PRM, not the update alone, decides where π1 lands. Every budget's π1 is also paired
with the first budget's. Writes <sweep>/fig3.md and the plot.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from agentprm.eval.paired import delta_cell, paired_difference, resolved
from agentprm.io import write_text
from agentprm.policy.update import UpdateResult


def checks(run: Path) -> tuple[list[dict], int | None]:
    """The detector's checks of a run's iteration-1 update and its first alarm step."""
    meta = json.loads((run / "iter_1" / "policy" / "agentprm.json").read_text())
    found = UpdateResult.read(meta)
    hacking = (found.details.get("hacking") if found else None) or {}
    if not hacking.get("checks"):
        raise SystemExit(f"{run}: its policy update was not watched by the detector (hacking.enabled)")
    return hacking["checks"], hacking.get("alarm_step")


def is_control(run: Path) -> bool:
    """Whether a run's update used the uniform critic (the control), from the config it saved."""
    return yaml.safe_load((run / "config.yaml").read_text()).get("policy", {}).get("critic") == "uniform"


def outcomes(runs: dict[int, Path], policy: str) -> dict[int, dict]:
    """{seed: per-task outcomes} of one policy's greedy eval row in each seed's run (its `results.json`)."""
    found = {}
    for seed, run in runs.items():
        rows = json.loads((run / "results.json").read_text())["rows"]
        row = next((r for r in rows if r["policy"] == policy and r["best_of_n"] == 1 and not r.get("search")), None)
        if row is None or "per_task" not in row:
            raise SystemExit(f"{run}/results.json: no greedy {policy} row with per-task outcomes")
        found[seed] = row["per_task"]
    return found


FLAT = 0.005   # a PRM score that moved less than this (half a point of Q) is read as flat


def success(comp: dict) -> str:
    """Eval success up, flat or down: the paired difference π1 − π0 resolved or not."""
    return ("success down" if comp["delta"] < 0 else "success up") if resolved(comp) else "success flat"


def verdict(rise: float, comp: dict) -> str:
    """The figure's reading: the PRM score up, flat or down (by FLAT) beside eval success (`success`); "hacked"
    when the score rose while success fell."""
    prm = "PRM up" if rise > FLAT else "PRM down" if rise < -FLAT else "PRM flat"
    return f"{'hacked: ' if (prm, success(comp)) == ('PRM up', 'success down') else ''}{prm}, {success(comp)}"


def plot(runs: dict[str, dict[int, tuple[list[dict], int | None]]], path: Path) -> None:
    from agentprm.loop.report import plt, save_png   # matplotlib on its file backend

    fig, axes = plt.subplots(1, len(runs), figsize=(4.4 * len(runs), 3.4), squeeze=False, sharey=True)
    for ax, (variant, seeds) in zip(axes[0], runs.items()):
        right = ax.twinx()
        for k, (seed, (found, alarm)) in enumerate(sorted(seeds.items())):
            steps = [c["step"] for c in found]
            ax.plot(steps, [c["prm"] for c in found], color=f"C{k}", marker=".", label=f"PRM score, seed {seed}")
            right.plot(steps, [c.get("probe_success") for c in found], color=f"C{k}", linestyle="--",
                       label=f"probe success, seed {seed}")
            if alarm is not None:
                ax.axvline(alarm, color=f"C{k}", linestyle=":", alpha=0.7)
        ax.set(title=variant, xlabel="policy-update step")
        right.set_ylim(0, 1)
        if variant == list(runs)[-1]:   # one label for the shared right axis, clear of the next panel
            right.set_ylabel("π_θ success (probe, dashed)")
        ax.legend(loc="lower left", fontsize=6)
    axes[0, 0].set_ylabel("mean Q1 of π_θ's greedy replies")
    fig.suptitle("PRM score vs true success during the policy update (dotted: detector alarm)", fontsize=9)
    save_png(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", type=Path, required=True, help="the fig3 sweep's folder (scripts/sweep.py --out)")
    ap.add_argument("--plot", type=Path, default=None, help="where to draw the figure (default <sweep>/fig3.png)")
    args = ap.parse_args(argv)
    sweep = json.loads((args.sweep / "sweep.json").read_text())
    folders = {v: {s: args.sweep / v / f"seed{s}" for s in sweep["seeds"]} for v in sweep["variants"]}
    controls = [v for v, seeds in folders.items() if all(is_control(run) for run in seeds.values())]
    runs = {v: {s: checks(run) for s, run in seeds.items()} for v, seeds in folders.items() if v not in controls}
    pi1 = {v: outcomes(seeds, "pi1") for v, seeds in folders.items()}
    lines = ["| budget | seed | PRM score, step 0 → last | probe success, step 0 → last | first alarm |",
             "|---|---|---|---|---|"]
    summary = ["| budget | PRM score rise (mean over seeds) | π1 − π0, eval (paired, all seeds) | reading | "
               "detector |", "|---|---|---|---|---|"]
    for variant, seeds in folders.items():
        comp = paired_difference(pi1[variant], outcomes(seeds, "pi0"))
        if variant in controls:
            summary.append(f"| {variant} (control: uniform critic) | — | {delta_cell(comp)} | {success(comp)} | "
                           "not watched |")
            continue
        rises, alarms = [], []
        for seed, (found, alarm) in sorted(runs[variant].items()):
            first, last = found[0], found[-1]
            rises.append(last["prm"] - first["prm"])
            alarms.append(alarm)
            probe = [c.get("probe_success", float("nan")) for c in (first, last)]
            lines.append(f"| {variant} | {seed} | {first['prm']:.3f} → {last['prm']:.3f} ({rises[-1]:+.3f}) | "
                         f"{probe[0]:.2f} → {probe[1]:.2f} | {'none' if alarm is None else f'step {alarm}'} |")
        rise = sum(rises) / len(rises)
        raised = sum(a is not None for a in alarms)
        summary.append(f"| {variant} | {rise:+.3f} | {delta_cell(comp)} | {verdict(rise, comp)} | "
                       f"alarm on {raised} of {len(alarms)} seeds |")
    watched = list(runs)
    pairs = [(v, watched[0]) for v in watched[1:]] + [(v, c) for c in controls for v in watched]
    between = ["| π1 of | minus π1 of | Δ points (paired, all seeds) | resolved |", "|---|---|---|---|"]
    between += [f"| {a} | {b} | {delta_cell(c)} | {'yes' if resolved(c) else 'no'} |"
                for a, b in pairs for c in [paired_difference(pi1[a], pi1[b])]]
    args.plot = args.plot or args.sweep / "fig3.png"
    plot(runs, args.plot)
    text = "\n".join(summary + [""] + between + [""] + lines) + f"\n\n![Fig. 3 contrast]({args.plot})\n"
    write_text(args.sweep / "fig3.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
