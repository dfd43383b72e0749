"""`agentprm loop` (any config) and `agentprm quickstart` (the main job on the embedded default)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentprm.commands.common import (add_device_flags, add_json_flags, add_tracking_flags, config_from_args,
                                     write_summary)
from agentprm.outputs import declare
from agentprm.tracking import TrackingConfig

QUICKSTART_OUT = "runs/quickstart"


def register(sub) -> None:
    p = sub.add_parser("loop", help="run the AgentPRM loop from a YAML config (resumable)")
    p.add_argument("--config", required=True, help="YAML config (see configs/ and agentprm/loop/config.py)")
    p.add_argument("--run-dir", required=True, help="run folder (outputs, markers, results.json, report.md)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --run-dir")
    p.add_argument("--report-to", metavar="NAMES", help="tensorboard, wandb, mlflow (comma-separated) or none: "
                                                        "overrides the config's tracking.report_to")
    add_json_flags(p)
    declare(p, {"run_dir": "run"})
    p.set_defaults(func=run_loop)

    q = sub.add_parser("quickstart", help="the main job: one AgentPRM iteration from the bundled tiny π0 on "
                                          "generated ALFWorld tasks, then π0, π1 and beam search with Q1 beside the "
                                          "same beam with a uniform critic on 216 eval games (~11 min on 2 cores)")
    q.add_argument("--out", default=QUICKSTART_OUT, help=f"run folder (default {QUICKSTART_OUT})")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--resume", action="store_true", help="continue an interrupted quickstart in --out")
    q.add_argument("--algo", default="agentprm", help="algorithm (default agentprm)")
    q.add_argument("--retrain", action="store_true", help="train π0 from expert demos instead of the bundled one")
    add_tracking_flags(q, by_cli=False)
    add_json_flags(q)
    declare(q, {"out": "run"})
    add_device_flags(q)
    q.set_defaults(func=run_quickstart)


def _run(cfg, run_dir, args) -> dict:
    from agentprm.loop.run import Loop
    from agentprm.view.page import view_run

    results = Loop(cfg, run_dir, resume=args.resume).run()
    page = view_run(run_dir)   # RUN_DIR/view.html, the run's own file: rewritten each time
    print_results(results["rows"], title=f"{cfg.algo} — {run_dir}", comparisons=results.get("comparisons", []))
    print(f"report: {run_dir}/report.md   plots: {run_dir}/plots/   viewer: {page}   "
          f"({results['wall_seconds']:.0f} s)")
    write_summary(args, results)
    return results


def run_loop(args) -> int:
    from agentprm.loop.config import load_config

    cfg = load_config(args.config)
    if args.report_to is not None:
        cfg.tracking.report_to = args.report_to
    _run(cfg, args.run_dir, args)
    return 0


def run_quickstart(args) -> int:
    from agentprm.loop.config import quickstart_config
    from agentprm.models.device import DeviceConfig

    cfg = quickstart_config(algo=args.algo, seed=args.seed, device=config_from_args(DeviceConfig, args))
    cfg.policy0.retrain = args.retrain
    cfg.tracking = config_from_args(TrackingConfig, args)
    results = _run(cfg, args.out, args)
    print(main_claim(results.get("comparisons", [])))
    return 0


# What the quickstart's main claim has done on the seeds measured (docs/results.md): every quickstart run prints it
# beside its own verdict, so that one run's answer is read against the distribution.
SEEDS_MEASURED = "resolved on 4 of the 5 seeds measured (seeds 0, 1, 2, 6465: +5.6 to +9.3; seed 6464: −0.5)"


def main_claim(comparisons: list[dict]) -> str:
    """The verdict on the quickstart's main claim — beam search with Q1 against the same beam with a uniform critic in
    Q1's place — in words: resolved or not on this seed, and what the seeds measured so far did."""
    from agentprm.eval.paired import CONTROL, delta_cell, resolved

    claim = next((c for c in comparisons if c["b"].endswith(CONTROL) and "beam" in c["a"]), None)
    if claim is None:
        return "the main claim (beam with Q1 vs the same beam with a uniform critic) was not played in this run"
    if resolved(claim) and claim["delta"] > 0:
        return (f"The PRM's effect on this seed: {claim['a']} − {claim['b']} = {delta_cell(claim)} points, resolved: "
                f"Q1 ranks the beam's branches better than random scores ({SEEDS_MEASURED}).")
    return (f"The PRM's effect on this seed: {claim['a']} − {claim['b']} = {delta_cell(claim)} points — NOT resolved "
            "(the 95% CI includes 0 or lies below it): on this seed the learned critic did not rank the beam's "
            "branches measurably better than random scores. One training run of Q1 (288 rollouts, one fit) does not "
            f"always learn a useful ranking; the effect is {SEEDS_MEASURED}. Another --seed, or a larger budget "
            "(configs/agentprm-cpu.yaml), shows whether it is this run or the method.")


def print_results(rows: list[dict], title: str, comparisons: list[dict] = ()) -> None:
    """The rows, each with its paired difference to the row it claims to beat (eval/paired.py); a difference whose
    CI includes 0 is marked as not resolved, so the table never implies an improvement it cannot see."""
    from agentprm.eval.paired import CONTROLS, delta_cell, resolved, row_name, search_cell

    # a row's claim: π_i vs π_{i-1}; a search vs each control that was played (a uniform critic: the PRM's share;
    # π's own log π: what the PRM adds over the critic-free ranker), one line each, else vs its policy
    vs_controls: dict[str, list[dict]] = {}
    first: dict[str, dict] = {}
    for c in comparisons:
        if c["b"].endswith(tuple(CONTROLS)):
            vs_controls.setdefault(c["a"], []).append(c)
        else:
            first.setdefault(c["a"], c)
    table = Table(title=escape(title))
    for col in ("policy", "acts by", "success", "95% CI", "eps", "Δ vs", "paired Δ [95% CI]", "≠ 0"):
        table.add_column(col, justify="right", no_wrap=col.startswith("paired"))
    for r in rows:
        lo, hi = r["ci95"]
        name = row_name(r)
        cells = (r["policy"], search_cell(r), f"{100 * r['success_rate']:.1f}%", f"[{100 * lo:.0f}, {100 * hi:.0f}]",
                 str(r["episodes"]))
        for c in vs_controls.get(name) or [first.get(name)]:
            table.add_row(*cells, c["b"] if c else "", delta_cell(c) if c else "",
                          ("yes" if resolved(c) else "no") if c else "")
            cells = ("",) * 5   # a second claim's line leaves the row's own cells blank
    console = Console(width=max(Console().width, 120))   # a log file or pipe gets 80 columns: the CIs wrapped, and
    # at 100 the control's name ("pi1+beam2x2-uniform") was cut
    console.print(table)
    unresolved = [c for c in comparisons if not resolved(c)]
    if unresolved:
        console.print(f"{len(unresolved)} of {len(comparisons)} paired differences have a 95% CI that includes 0: "
                      "this budget cannot tell those rows apart (more eval tasks narrow the CI).")
