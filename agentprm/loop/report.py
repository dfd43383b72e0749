"""results.json → report.md (tables) and PNG plots: success vs iteration with 95% CIs, success vs the env steps
and training seconds spent (the learning curve), Best-of-N success vs N, and the PRM's mean score over policy-update steps next to the policy's measured success (the paper's
reward-hacking picture: a rising PRM score with flat or falling success means the policy exploits Q_i)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from agentprm.data.summary import rate_cells  # noqa: E402
from agentprm.eval.paired import comparisons_table, control_of, search_cell  # noqa: E402
from agentprm.io import atomic_leftovers, atomic_path, write_text  # noqa: E402


def clear_leftovers(path: Path) -> None:
    """The hidden temp copy a kill inside an earlier atomic write of `path` left: the run's files written after its
    last stage (results.json, report.md, plots) are rewritten on every resume, and their temp names are agentprm's."""
    for stale in atomic_leftovers(path):
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()


def results_table(rows: list[dict]) -> str:
    lines = ["| policy | iteration | acts by | success % | 95% CI | episodes |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['policy']} | {r['iteration']} | {search_cell(r)} | {rate_cells(r)} |" for r in rows]
    return "\n".join(lines)


def save_png(fig, path: Path) -> None:
    """Write the figure atomically and close it."""
    clear_leftovers(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def errorbar_ci(ax, xs, rows, **kw):
    """Success % of `rows` at `xs` with their 95% CIs as error bars."""
    ys = [100 * r["success_rate"] for r in rows]
    err = [[y - 100 * r["ci95"][0] for y, r in zip(ys, rows)], [100 * r["ci95"][1] - y for y, r in zip(ys, rows)]]
    ax.errorbar(xs, ys, yerr=err, capsize=4, marker="o", **kw)


def plot_success(rows: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    greedy = [r for r in rows if r["best_of_n"] == 1]
    errorbar_ci(ax, [r["iteration"] for r in greedy], greedy, label="policy π_i (greedy)")
    for label in dict.fromkeys(search_cell(r) for r in rows if r["best_of_n"] > 1):
        searched = [r for r in rows if search_cell(r) == label]
        control = control_of(searched[0])
        errorbar_ci(ax, [r["iteration"] + 0.05 for r in searched], searched,
                    label=label if control else f"{label} with Q_i", linestyle="--")
    ax.set(xlabel="iteration", ylabel="success % (95% CI)", title="Success vs iteration", ylim=(0, 100))
    ax.set_xticks(sorted({r["iteration"] for r in rows}))
    ax.legend(fontsize=8)
    save_png(fig, path)


def curve_table(curve: list[dict]) -> str:
    kl = any("kl_to_pi0" in c for c in curve)
    lines = ["| iteration | env steps | training s | success % | 95% CI |" + (" KL(π_i ‖ π0) | greedy = π0's |" if kl
                                                                             else ""),
             "|---|---|---|---|---|" + ("---|---|" if kl else "")]
    lines += [f"| {c['iteration']} | {c['env_steps']:,} | {c['train_seconds']:,.0f} | {100 * c['success_rate']:.1f} | "
              f"[{100 * c['ci95'][0]:.1f}, {100 * c['ci95'][1]:.1f}] |"
              + (f" {c['kl_to_pi0']:.3f} | {100 * c['greedy_agrees_with_pi0']:.0f}% |" if "kl_to_pi0" in c
                 else " | |" if kl else "") for c in curve]
    return "\n".join(lines)


def plot_curve(curve: list[dict], path: Path) -> None:
    """Greedy success against env steps (left) and against training seconds (right), 95% CIs."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, key, label in ((axes[0], "env_steps", "env steps (training rollouts)"),
                           (axes[1], "train_seconds", "training seconds")):
        errorbar_ci(ax, [c[key] for c in curve], curve)
        ax.set(xlabel=label, ylim=(0, 100))
    axes[0].set(ylabel="success % (95% CI)")
    fig.suptitle("Learning curve: greedy π_i on the eval games", fontsize=10)
    save_png(fig, path)


def plot_best_of_n(rows: list[dict], path: Path) -> None:
    last = max(r["iteration"] for r in rows)
    pts = sorted((r for r in rows if r["iteration"] == last and not r.get("search")), key=lambda r: r["best_of_n"])
    fig, ax = plt.subplots(figsize=(5, 3.5))
    errorbar_ci(ax, [r["best_of_n"] for r in pts], pts)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="N (samples per turn)", ylabel="success % (95% CI)", title=f"Best-of-N, iteration {last}",
           ylim=(0, 100))
    save_png(fig, path)


def plot_prm_vs_success(update_history: dict[int, list[dict]], rows: list[dict], path: Path) -> None:
    """Mean PRM score of the policy's sampled replies over update steps (left axis; methods without a PRM have
    none), and eval success at the end of each iteration (right axis), on one cumulative step axis."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ends, offset = {0: 0}, 0
    for i, hist in sorted(update_history.items()):
        scored = [h for h in hist if "prm_mean" in h]
        if scored:
            ax.plot([offset + h["step"] for h in scored], [h["prm_mean"] for h in scored], label=f"PRM score, iter {i}")
        offset += hist[-1]["step"] if hist else 0
        ends[i] = offset
    greedy = sorted((r["iteration"], r["success_rate"]) for r in rows if r["best_of_n"] == 1)
    ax2 = ax.twinx()
    ax2.plot([ends.get(i, 0) for i, _ in greedy], [s for _, s in greedy], "k--o", label="eval success")
    ax.set(xlabel="policy-update step (cumulative)", ylabel="mean Q_i of sampled replies", ylim=(0, 1))
    ax2.set(ylabel="eval success", ylim=(0, 1))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=7)
    ax2.legend(loc="lower right", fontsize=7)
    ax.set_title("PRM score vs true success during policy updates", fontsize=9)
    save_png(fig, path)


HACKING_SIGNALS = (("hack_prm", "Q_i, greedy replies"), ("hack_ens_std", "ensemble std"),
                   ("hack_kl", "KL proxy to π_{i-1}"), ("hack_spearman", "probe Spearman"),
                   ("hack_probe_success", "probe success\n(truth, not alarmed on)"))


def plot_hacking(update_history: dict[int, list[dict]], path: Path) -> bool:
    """The reward-hacking detector's signals (agentprm/policy/hacking.py) over update steps, one panel each, the
    first alarm of each iteration marked; False (no plot) when no update was monitored."""
    checked = {i: [h for h in hist if "hack_prm" in h] for i, hist in update_history.items()}
    signals = [(k, label) for k, label in HACKING_SIGNALS
               if any(h.get(k) is not None for rows in checked.values() for h in rows)]
    if not signals:
        return False
    fig, axes = plt.subplots(len(signals), 1, figsize=(5, 1.6 * len(signals) + 0.6), sharex=True, squeeze=False)
    offset = 0
    for i, hist in sorted(update_history.items()):
        rows = checked.get(i, [])
        alarms = [offset + h["step"] for h in rows if h["hack_alarm"]]
        for ax, (key, label) in zip(axes[:, 0], signals):
            pts = [(offset + h["step"], h[key]) for h in rows if h.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker=".", label=f"iter {i}")
            if alarms:
                ax.axvline(alarms[0], color="red", linestyle=":", label=f"alarm, iter {i}")
            ax.set_ylabel(label, fontsize=7)
        offset += hist[-1]["step"] if hist else 0
    axes[0, 0].legend(fontsize=6)
    axes[0, 0].set_title("Reward-hacking detector (no outcome labels of π_θ)", fontsize=9)
    axes[-1, 0].set_xlabel("policy-update step (cumulative)")
    save_png(fig, path)
    return True


def write_report(run_dir: Path, results: dict, update_history: dict[int, list[dict]]) -> None:
    rows, plots = results["rows"], run_dir / "plots"
    plot_success(rows, plots / "success_vs_iteration.png")
    curve = results.get("curve") or []
    if curve:
        plot_curve(curve, plots / "learning_curve.png")
    plot_best_of_n(rows, plots / "best_of_n.png")
    plot_prm_vs_success(update_history, rows, plots / "prm_score_vs_success.png")
    hacking = plot_hacking(update_history, plots / "hacking.png")
    cfg = results["config"]
    held = cfg["tasks"].get("validate", 0)
    text = [f"# AgentPRM run ({cfg['algo']}, seed {cfg['seed']}, {cfg['iterations']} iteration(s))", "",
            *([f"A tuning run: every eval played {held} held-out train games (tasks.validate), not the eval split.",
               ""] if held else []),
            results_table(rows), "",
            *(["Paired differences on the same eval tasks (bootstrap over tasks, 10,000 resamples):", "",
               comparisons_table(results["comparisons"]), ""] if results.get("comparisons") else []),
            f"Wall time: {results['wall_seconds']:.0f} s. Eval: {cfg['eval']['episodes_per_task']} episode(s) per "
            f"eval task, step budget {cfg['eval']['max_steps']}; 95% CIs are Wilson intervals over episodes.", "",
            *(["Learning curve (greedy π_i; env steps and seconds of the training iterations so far):", "",
               curve_table(curve), "", "![curve](plots/learning_curve.png)", ""] if curve else []),
            "![success](plots/success_vs_iteration.png)", "![bon](plots/best_of_n.png)",
            "![prm](plots/prm_score_vs_success.png)", ""]
    if hacking:
        text += ["![hacking](plots/hacking.png)", ""]
    clear_leftovers(run_dir / "report.md")
    write_text(run_dir / "report.md", "\n".join(text))
