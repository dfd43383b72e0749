"""scripts/fig3_contrast.py on a hand-built sweep folder: the detector's checks read back from each run's policy, the
PRM score's rise and the probe at both ends, the paired eval differences (π1 − π0, between budgets, against the
uniform-critic control) from the runs' own per-task outcomes, and the reading each budget gets."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fig3_contrast.py"
_spec = importlib.util.spec_from_file_location("fig3_contrast", SCRIPT)
fig3 = sys.modules["fig3_contrast"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fig3)


TASKS = [f"eval-{k:05d}" for k in range(20)]


def _outcomes(wins: int) -> dict:
    """One episode per task, the first `wins` tasks won: two rows' difference is their win counts' over 20."""
    return {t: [int(k < wins), 1] for k, t in enumerate(TASKS)}


def _run(folder: Path, pi1_wins: int, prm: list[float] | None = None, probe: list[float] | None = None,
         alarm: int | None = None) -> None:
    """A seed's run: π0 wins 16 of 20 eval tasks, π1 `pi1_wins`; with `prm`, the detector's checks of its update,
    else the update used the uniform critic (the control, unwatched)."""
    (folder / "iter_1" / "policy").mkdir(parents=True)
    rows = [{"policy": p, "iteration": i, "best_of_n": 1, "success_rate": w / 20, "per_task": _outcomes(w)}
            for i, (p, w) in enumerate((("pi0", 16), ("pi1", pi1_wins)))]
    (folder / "results.json").write_text(json.dumps({"rows": rows}))
    (folder / "config.yaml").write_text(f"policy: {{critic: {'prm' if prm else 'uniform'}}}\n")
    if prm is None:
        return
    checks = [{"step": 40 * k, "prm": p, "ens_std": 0.05, "kl": 0.0, "probe_success": s, "alarm": False,
               "reasons": []} for k, (p, s) in enumerate(zip(prm, probe))]
    record = {"config": {}, "seed": 0, "reference": "pi0", "history": [],
              "hacking": {"checks": checks, "alarm_step": alarm}}
    (folder / "iter_1" / "policy" / "agentprm.json").write_text(json.dumps({"online_dpo": record}))


def _comparison(delta: float, lo: float, hi: float) -> dict:
    return {"delta": delta, "ci95": [lo, hi], "episodes": 72}


def test_fig3_reads_checks_pairs_the_evals_and_says_which_budget_was_hacked(tmp_path):
    _run(tmp_path / "low" / "seed0", 4, [0.30, 0.36, 0.42], [0.75, 0.50, 0.25], alarm=80)
    _run(tmp_path / "high" / "seed0", 18, [0.30, 0.33, 0.35], [0.75, 0.79, 0.83])
    _run(tmp_path / "uniform" / "seed0", 10)
    (tmp_path / "sweep.json").write_text(json.dumps({"seeds": [0], "variants": {"low": {}, "high": {}, "uniform": {}}}))
    assert fig3.main(["--sweep", str(tmp_path)]) == 0
    text = (tmp_path / "fig3.md").read_text()
    line = {cells[1].strip() + "|" + cells[2].strip(): row for row in text.splitlines()
            for cells in [row.split("|")] if len(cells) > 3}
    low, high = line["low|+0.120"], line["high|+0.050"]
    assert "| -60.0 [" in low and "hacked: PRM up, success down" in low and "alarm on 1 of 1 seeds" in low
    assert "| +10.0 [" in high and "PRM up, success flat" in high and "alarm on 0 of 1 seeds" in high
    control = line["uniform (control: uniform critic)|—"]
    assert "| -30.0 [" in control and "success down | not watched" in control
    # each budget's π1 against the first budget's and against the control's, paired task by task
    assert line["high|low"].startswith("| high | low | +70.0 [") and line["high|low"].endswith("| yes |")
    assert line["low|uniform"].startswith("| low | uniform | -30.0 [") and line["low|uniform"].endswith("| yes |")
    assert line["high|uniform"].startswith("| high | uniform | +40.0 [")
    assert "| low | 0 | 0.300 → 0.420 (+0.120) | 0.75 → 0.25 | step 80 |" in text
    assert (tmp_path / "fig3.png").stat().st_size > 1000


def test_fig3_refuses_a_watched_run_without_checks(tmp_path):
    _run(tmp_path / "high" / "seed0", 18, [0.30, 0.33], [0.75, 0.79])
    (tmp_path / "high" / "seed0" / "iter_1" / "policy" / "agentprm.json").write_text(json.dumps({}))
    (tmp_path / "sweep.json").write_text(json.dumps({"seeds": [0], "variants": {"high": {}}}))
    with pytest.raises(SystemExit, match="not watched by the detector"):
        fig3.main(["--sweep", str(tmp_path)])


def test_fig3_verdict_needs_a_resolved_difference():
    flat = _comparison(-0.05, -0.12, 0.02)
    down = _comparison(-0.4, -0.5, -0.3)
    assert fig3.verdict(0.1, flat) == "PRM up, success flat"
    assert fig3.verdict(-0.01, flat) == "PRM down, success flat"
    assert fig3.verdict(0.0004, down) == "PRM flat, success down"            # the update broke π, Q did not move
    assert fig3.verdict(0.012, down) == "hacked: PRM up, success down"
    assert fig3.success(_comparison(0.2, 0.1, 0.3)) == "success up"
