"""A run folder (docs/run-folder.md) → the one JSON-able record the viewer page draws: the results rows and paired
comparisons of `results.json`, the curves by iteration (success, the PRM's held-out metrics and training loss, the
policy update's history with the reward-hacking detector's signals) and every saved eval episode turn by turn.

Per turn an episode carries what the agent saw and did, the candidates it weighed with the critic's scores (Best-of-N
and beam rows), and its Monte-Carlo return from that turn, γ^(T−1−t)·won — the one-sample Q̂ of the action taken
(targets/mc.py `returns_to_go`, the same γ as the run's targets). Oracle values are not in a run folder
(scripts/oracle_bounds.py computes them on its own), so the page has none to show."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from agentprm.data.trajectories import iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.io import parse_json, read_text
from agentprm.eval.paired import row_name, search_cell
from agentprm.eval.play import EvalRow
from agentprm.policy.update import UpdateResult
from agentprm.targets.mc import returns_to_go

PRM_METRICS = ("pairwise_accuracy", "spearman", "bce")


def _json(path: Path) -> dict:
    try:
        text = read_text(path, max_bytes=1 << 30)
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror})") from None
    return parse_json(text, path)


def _iterations(run_dir: Path) -> list[int]:
    found = [p.name.removeprefix("iter_") for p in run_dir.glob("iter_*") if p.is_dir()]
    return sorted(int(i) for i in found if i.isdigit())


def curves(run_dir: Path) -> dict:
    """By iteration: the PRM's metrics on its train and held-out tasks before/after training and its loss history
    (iter_i/prm/agentprm.json), and the policy update's logged history (iter_i/policy/agentprm.json `update`)."""
    prm, prm_loss, update = [], {}, {}
    for i in _iterations(run_dir):
        meta_path = run_dir / f"iter_{i}" / "prm" / "agentprm.json"
        if meta_path.is_file():
            meta = _json(meta_path)
            final = meta.get("metrics") or {}
            prm.append({"iteration": i, **{f"{half}_{m}": final[half].get(m) for half in ("train", "heldout")
                                           if isinstance(final.get(half), dict) for m in PRM_METRICS}})
            prm_loss[i] = [{"step": h["step"], "loss": h["loss"]} for h in meta.get("history") or []]
        policy_meta = run_dir / f"iter_{i}" / "policy" / "agentprm.json"
        if policy_meta.is_file():
            result = UpdateResult.read(_json(policy_meta))
            update[i] = result.logged_history() if result else []
    return {"prm": prm, "prm_loss": prm_loss, "update": update}


ROW_FIELDS = {"policy": str, "iteration": int, "best_of_n": int, "success_rate": (int, float), "ci95": list,
              "episodes": int}
STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")   # an evals/ file's stem: no folder, no way out of evals/


def check_results(results: object, path: Path) -> dict:
    """results.json as the viewer reads it, or a one-line error naming the file and field: an object whose `rows` are
    objects with a policy, iteration, best_of_n, success rate, CI and episode count, whose eval file stays in evals/."""
    if not isinstance(results, dict):
        raise UserError(f"{path}: must be a JSON object with 'rows', got {type(results).__name__}")
    rows = results.get("rows", [])
    if not isinstance(rows, list):
        raise UserError(f"{path}: field 'rows' must be a list")
    for k, r in enumerate(rows):
        if not isinstance(r, dict):
            raise UserError(f"{path}: field 'rows[{k}]' must be an object")
        for name, kind in ROW_FIELDS.items():
            if not isinstance(r.get(name), kind) or isinstance(r.get(name), bool):
                raise UserError(f"{path}: field 'rows[{k}].{name}' is missing or not a {getattr(kind, '__name__', 'number')}")
        if not isinstance(r.get("search", ""), str):
            raise UserError(f"{path}: field 'rows[{k}].search' must be a string")
        stage = EvalRow(r["policy"], r["iteration"], r["best_of_n"], r.get("search", "")).stage
        if not STAGE_NAME.fullmatch(stage) or ".." in stage:
            raise UserError(f"{path}: field 'rows[{k}].policy' names no eval file of this run ({r['policy'][:40]!r})")
    return results


def eval_rows(results: dict) -> list[dict]:
    """The results rows as the page lists them: name, stage (its evals/ file), how it acts, rate and CI."""
    out = []
    for r in results.get("rows", []):
        row = EvalRow(r["policy"], r["iteration"], r["best_of_n"], r.get("search", ""))
        out.append({"name": row_name(r), "stage": row.stage, "policy": r["policy"], "iteration": r["iteration"],
                    "acts_by": search_cell(r), "best_of_n": r["best_of_n"], "search": r.get("search", ""),
                    "success_rate": r["success_rate"], "ci95": r["ci95"], "episodes": r["episodes"]})
    return out


def episodes(path: Path, row: str, gamma: float) -> list[dict]:
    """One eval's saved episodes (evals/<row>.parquet), turn by turn, with each turn's MC return."""
    out = []
    for e in iter_episodes(read_trajectories(path)):
        won = bool(e.steps) and e.steps[-1].won
        mc = returns_to_go([s.reward for s in e.steps], gamma) if e.steps else np.zeros(0)
        out.append({"id": e.episode_id, "row": row, "task_id": e.task_id, "task_type": e.task_type, "task": e.task,
                    "won": won, "turns": len(e.steps), "error": e.error,
                    "steps": [{"obs": s.observation, "action": s.action, "valid": s.admissible_action,
                               "cands": list(s.candidates), "scores": [round(float(x), 4) for x in s.candidate_scores],
                               "mc": round(float(g), 4)} for s, g in zip(e.steps, mc)]})
    return out


def collect_run(run_dir: str | Path) -> dict:
    """Everything the page shows, read from a finished (or resumed-and-finished) run folder."""
    run_dir = Path(run_dir)
    if not (run_dir / "results.json").is_file():
        raise UserError(f"{run_dir}: no results.json — not a finished `agentprm loop` run folder "
                        "(a run still going writes it last)")
    results = check_results(_json(run_dir / "results.json"), run_dir / "results.json")
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    gamma = float((config.get("targets") or {}).get("gamma", 0.9))
    rows = eval_rows(results)
    saved = []
    for row in rows:
        path = run_dir / "evals" / f"{row['stage']}.parquet"
        row["saved"] = path.is_file() and not path.is_symlink()   # a link may lead out of the run folder
        if row["saved"]:
            saved += episodes(path, row["name"], gamma)
    provenance = results.get("provenance") or {}
    return {"run": {"dir": run_dir.resolve().name, "algo": config.get("algo"), "seed": config.get("seed"),
                    "iterations": config.get("iterations"), "gamma": gamma,
                    "wall_seconds": results.get("wall_seconds"), "git_revision": provenance.get("git_revision"),
                    "versions": provenance.get("versions") or {}},
            "rows": rows, "comparisons": results.get("comparisons") or [], "curves": curves(run_dir),
            "curve": results.get("curve") or [],
            "episodes": saved}
