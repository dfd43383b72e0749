"""scripts/fig3_contrast.py on a hand-built sweep folder: the detector's checks read back from each run's policy, the
PRM score's rise and the probe at both ends, the paired eval difference and the reading each budget gets."""
import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fig3_contrast.py"
_spec = importlib.util.spec_from_file_location("fig3_contrast", SCRIPT)
fig3 = sys.modules["fig3_contrast"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fig3)


def _run(folder: Path, prm: list[float], probe: list[float], alarm: int | None) -> None:
    checks = [{"step": 40 * k, "prm": p, "ens_std": 0.05, "kl": 0.0, "probe_success": s, "alarm": False,
               "reasons": []} for k, (p, s) in enumerate(zip(prm, probe))]
    record = {"config": {}, "seed": 0, "reference": "pi0", "history": [],
              "hacking": {"checks": checks, "alarm_step": alarm}}
    (folder / "iter_1" / "policy").mkdir(parents=True)
    (folder / "iter_1" / "policy" / "agentprm.json").write_text(json.dumps({"online_dpo": record}))


def _comparison(variant: str, delta: float, lo: float, hi: float) -> dict:
    return {"a": f"{variant}: pi1", "b": f"{variant}: pi0", "delta": delta, "ci95": [lo, hi], "episodes": 72}


def test_fig3_reads_checks_and_says_which_budget_was_hacked(tmp_path):
    _run(tmp_path / "low" / "seed0", [0.30, 0.36, 0.42], [0.75, 0.50, 0.25], alarm=80)
    _run(tmp_path / "high" / "seed0", [0.30, 0.33, 0.35], [0.75, 0.79, 0.83], alarm=None)
    (tmp_path / "sweep.json").write_text(json.dumps({
        "seeds": [0], "variants": {"low": {}, "high": {}},
        "comparisons": [_comparison("low", -0.10, -0.18, -0.02), _comparison("high", 0.05, 0.01, 0.09),
                        {"a": "high: pi1", "b": "low: pi1", "delta": 0.15, "ci95": [0.05, 0.25], "episodes": 72}]}))
    assert fig3.main(["--sweep", str(tmp_path)]) == 0
    text = (tmp_path / "fig3.md").read_text()
    low = next(line for line in text.splitlines() if line.startswith("| low | +"))
    high = next(line for line in text.splitlines() if line.startswith("| high | +"))
    assert "+0.120" in low and "-10.0 [-18.0, -2.0]" in low and "hacked: PRM up, success down" in low
    assert "alarm on 1 of 1 seeds" in low
    assert "+0.050" in high and "PRM up, success up" in high and "alarm on 0 of 1 seeds" in high
    assert "| low | 0 | 0.300 → 0.420 (+0.120) | 0.75 → 0.25 | step 80 |" in text
    assert (tmp_path / "fig3.png").stat().st_size > 1000


def test_fig3_verdict_needs_a_resolved_difference():
    flat = _comparison("low", -0.05, -0.12, 0.02)
    down = _comparison("low", -0.4, -0.5, -0.3)
    assert fig3.verdict(0.1, flat) == "PRM up, success flat"
    assert fig3.verdict(-0.01, flat) == "PRM down, success flat"
    assert fig3.verdict(0.0004, down) == "PRM flat, success down"            # the update broke π, Q did not move
    assert fig3.verdict(0.012, down) == "hacked: PRM up, success down"
    assert fig3.verdict(0.1, None) == "no paired eval"
