"""The paper's Fig. 3 contrast from a finished `configs/sweeps/fig3.yaml` sweep: at each rollout budget, the PRM
score of π_θ's greedy replies (what the policy update climbs) beside π_θ's true success over the update's steps,
and the reward-hacking detector's verdict.

    python scripts/sweep.py --config configs/sweeps/fig3.yaml --seeds 0 1 2 --out runs/fig3
    python scripts/fig3_contrast.py --sweep runs/fig3 [--plot docs/img/fig3-contrast.png]

Per budget and seed, from the detector's checks (iter_1/policy/agentprm.json, `online_dpo.hacking.checks`; step 0 is
π0 itself): the PRM score's rise from step 0 to the last check (mean Q1 of π_θ's greedy replies on held-out monitor
states), probe success at step 0 and at the last check (π_θ's greedy success on the same train tasks at every check),
the first alarm; per budget, π1 − π0 over the eval games (paired over seeds, from the sweep's `sweep.json`). The
figure's claim, "the PRM score rises while success falls", is read off the paired eval difference, not the probe
(24 episodes a check). Writes <sweep>/fig3.md and the plot.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentprm.eval.paired import delta_cell, resolved
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


def pi1_vs_pi0(sweep: dict, variant: str) -> dict | None:
    return next((c for c in sweep["comparisons"] if c["a"] == f"{variant}: pi1" and c["b"] == f"{variant}: pi0"), None)


FLAT = 0.005   # a PRM score that moved less than this (half a point of Q) is read as flat


def verdict(rise: float, comp: dict | None) -> str:
    """The figure's reading: the PRM score up, flat or down (by FLAT) beside eval success up, flat or down (the
    paired difference resolved or not); "hacked" when the score rose while success fell."""
    if comp is None:
        return "no paired eval"
    prm = "PRM up" if rise > FLAT else "PRM down" if rise < -FLAT else "PRM flat"
    success = ("success down" if comp["delta"] < 0 else "success up") if resolved(comp) else "success flat"
    return f"{'hacked: ' if (prm, success) == ('PRM up', 'success down') else ''}{prm}, {success}"


def plot(runs: dict[str, dict[int, tuple[list[dict], int | None]]], path: Path) -> None:
    from agentprm.loop.report import plt, save_png   # matplotlib on its file backend

    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.4), squeeze=False, sharey=True)
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
    runs = {v: {s: checks(args.sweep / v / f"seed{s}") for s in sweep["seeds"]} for v in sweep["variants"]}
    lines = ["| budget | seed | PRM score, step 0 → last | probe success, step 0 → last | first alarm |",
             "|---|---|---|---|---|"]
    summary = ["| budget | PRM score rise (mean over seeds) | π1 − π0, eval (paired, all seeds) | reading | "
               "detector |", "|---|---|---|---|---|"]
    for variant, seeds in runs.items():
        rises, alarms = [], []
        for seed, (found, alarm) in sorted(seeds.items()):
            first, last = found[0], found[-1]
            rises.append(last["prm"] - first["prm"])
            alarms.append(alarm)
            lines.append(f"| {variant} | {seed} | {first['prm']:.3f} → {last['prm']:.3f} ({rises[-1]:+.3f}) | "
                         f"{first.get('probe_success', float('nan')):.2f} → {last.get('probe_success', float('nan')):.2f}"
                         f" | {'none' if alarm is None else f'step {alarm}'} |")
        rise, comp = sum(rises) / len(rises), pi1_vs_pi0(sweep, variant)
        raised = sum(a is not None for a in alarms)
        summary.append(f"| {variant} | {rise:+.3f} | {delta_cell(comp) if comp else '—'} | {verdict(rise, comp)} | "
                       f"alarm on {raised} of {len(alarms)} seeds |")
    args.plot = args.plot or args.sweep / "fig3.png"
    plot(runs, args.plot)
    text = "\n".join(summary + [""] + lines) + f"\n\n![Fig. 3 contrast]({args.plot})\n"
    write_text(args.sweep / "fig3.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
