"""Sweeps (scripts/sweep.py): which stages a variant shares with the first config,
and the variants file."""
import dataclasses
from pathlib import Path

import pytest

from agentprm.errors import UserError
from agentprm.loop.config import LoopConfig, from_dict
from agentprm.loop.sweep import load_sweep, shared_stages

ALL = {"tasks_train", "tasks_eval", "demos", "policy_0", "eval_pi0", "iter_1/rollouts"}
TARGETS = {"iter_1/targets", "iter_1/prm"}


def test_shared_stages_follow_the_inputs_each_stage_reads():
    base = LoopConfig()
    assert shared_stages(dataclasses.replace(base, algo="grpo"), base) == ALL
    assert shared_stages(from_dict({"targets": {"shaping_alpha": 0.5}, "policy": {"steps": 5}}), base) == ALL
    # same targets section: the targets too (not across algorithms, nor for shaped targets with other PRM settings)
    assert shared_stages(from_dict({"policy": {"method": "kl-distill"}}), base) == ALL | TARGETS
    shaped = {"targets": {"shaping_alpha": 0.5}}
    assert shared_stages(from_dict({**shaped, "prm": {"epochs": 1}}), from_dict(shaped)) == ALL
    # same targets, other PRM settings: the targets but not Q1
    assert shared_stages(from_dict({"prm": {"epochs": 1}}), base) == ALL | {"iter_1/targets"}
    assert shared_stages(from_dict({**shaped, "policy": {"steps": 5}}), from_dict(shaped)) == ALL | TARGETS
    # more rollouts: π0 and its eval are the same, the rollouts are not; another way of playing: not the eval either
    assert shared_stages(from_dict({"rollout": {"per_task": 2}}), base) == ALL - {"iter_1/rollouts"}
    assert shared_stages(from_dict({"rollout": {"mode": "generate"}}), base) == ALL - {"eval_pi0", "iter_1/rollouts"}
    assert shared_stages(from_dict({"eval": {"max_steps": 10}}), base) == (ALL | TARGETS) - {"eval_pi0"}
    # Reset-50-50 changes the rollouts even with equal rollout settings, on either side
    reset = from_dict({"algo": "inverse-prm", "exploration": {"reset_frac": 0.5}})
    assert shared_stages(reset, base) == shared_stages(base, reset) == ALL - {"iter_1/rollouts"}
    assert shared_stages(from_dict({"policy0": {"retrain": True}}), base) == {"tasks_train", "tasks_eval", "demos"}
    # other train tasks: the eval split, the bundled π0 and its eval still agree (a retrained π0 would not)
    assert shared_stages(from_dict({"tasks": {"train": 8}}), base) == {"tasks_eval", "policy_0", "eval_pi0"}
    assert shared_stages(from_dict({"tasks": {"train": 8}, "policy0": {"retrain": True}}),
                         from_dict({"policy0": {"retrain": True}})) == {"tasks_eval"}
    assert shared_stages(from_dict({"tasks": {"eval": 8}}), base) == (ALL | TARGETS) - {"tasks_eval", "eval_pi0"}
    assert shared_stages(from_dict({"seed": 1}), base) == set()
    # a tuning run (held-out train games in place of the eval split) trains and evaluates on other games
    assert shared_stages(from_dict({"tasks": {"validate": 4}}), base) == {"policy_0"}
    tuning = from_dict({"tasks": {"validate": 4}})
    assert shared_stages(from_dict({"tasks": {"validate": 4}, "algo": "grpo"}), tuning) == ALL


def test_variants_merge_section_by_section_and_name_the_bad_field(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("base: {rollout: {per_task: 2, max_steps: 20}, eval: {best_of_n: []}}\n"
                    "variants:\n  none: {}\n  shaped: {targets: {shaping_alpha: 0.5}, rollout: {per_task: 3}}\n")
    variants = load_sweep(path).variants
    assert list(variants) == ["none", "shaped"]
    assert variants["none"].rollout.per_task == 2 and variants["none"].targets.shaping_alpha == 0.0
    shaped = variants["shaped"]
    assert (shaped.rollout.per_task, shaped.rollout.max_steps, shaped.targets.shaping_alpha) == (3, 20, 0.5)
    assert shaped.eval.best_of_n == [] and shaped.rollout.temperature == LoopConfig().rollout.temperature
    path.write_text("variants:\n  bad: {exploration: {reset_frac: 2}}\n")
    with pytest.raises(UserError, match=r"variants.bad: field 'exploration.reset_frac'"):
        load_sweep(path).variants
    path.write_text("base: {}\n")
    with pytest.raises(UserError, match="'variants'"):
        load_sweep(path).variants
    (tmp_path / "broken.yaml").write_text("rollout: [\n")   # a base file is read like any config: one-line errors
    path.write_text(f"base: {tmp_path / 'broken.yaml'}\nvariants: {{a: {{}}}}\n")
    with pytest.raises(UserError, match="broken.yaml: not valid YAML"):
        load_sweep(path).variants


@pytest.mark.parametrize("sweep", sorted((Path(__file__).parents[1] / "configs" / "sweeps").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_sweeps_load(sweep):
    assert len(load_sweep(sweep).variants) >= 1


@pytest.mark.slow   # minutes: run by `make test-all` and CI
def test_sweep_script_runs_variants_search_and_paired_claims(tmp_path, generated_tasks, tiny_policy):
    """scripts/sweep.py on a miniature: two variants sharing their first stages, a baseline, Best-of-2 vs beam 1x2;
    a second call with --resume rebuilds the same tables from the finished runs."""
    import importlib.util
    import json

    import yaml
    from test_loop import mini_config

    spec = importlib.util.spec_from_file_location("sweep", Path(__file__).parents[1] / "scripts" / "sweep.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    base = yaml.safe_load(mini_config(tmp_path, generated_tasks, tiny_policy).read_text())
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": base, "variants": {"agentprm": {}, "grpo": {"algo": "grpo"}},
                                    "baseline": "grpo", "search": {"variant": "agentprm", "width": 1, "expand": 2}}))
    out = tmp_path / "out"
    assert script.main(["--config", str(path), "--seeds", "0", "--out", str(out), "--outcomes", str(tmp_path / "o")]) == 0
    done = json.loads((out / "sweep.json").read_text())
    pairs = {(c["a"], c["b"]) for c in done["comparisons"]}
    assert {("agentprm: pi1", "agentprm: pi0"), ("agentprm: pi1", "grpo: pi1"), ("BoN-2", "agentprm: pi1"),
            ("beam-1x2", "BoN-2")} <= pairs
    assert [r["policy"] for r in done["search"]] == ["BoN-2", "beam-1x2"]
    assert json.loads((out / "grpo" / "seed0" / ".stages" / "iter_1__rollouts.done").read_text())["reused_from"]
    # a reused eval brings its episodes along: π0's states are what every π_i's drift is measured on
    assert json.loads((out / "grpo" / "seed0" / ".stages" / "eval_pi0.done").read_text())["reused_from"]
    assert ((out / "grpo" / "seed0" / "evals" / "pi0.parquet").read_bytes()
            == (out / "agentprm" / "seed0" / "evals" / "pi0.parquet").read_bytes())
    assert "kl_to_pi0" in json.loads((out / "grpo" / "seed0" / "results.json").read_text())["curve"][-1]
    first = (out / "sweep.md").read_text()
    assert script.main(["--config", str(path), "--seeds", "0", "--out", str(out), "--resume"]) == 0
    assert (out / "sweep.md").read_text() == first
    # the committed outcome files alone rebuild every pooled row and every non-search paired difference
    again = tmp_path / "again"
    assert script.main(["--config", str(path), "--out", str(again), "--from-outcomes", str(tmp_path / "o")]) == 0
    rebuilt = json.loads((again / "sweep.json").read_text())
    assert rebuilt["seeds"] == [0]
    for name in ("agentprm", "grpo"):
        assert [(r["policy"], r["success_rate"], r["episodes"]) for r in rebuilt["variants"][name]["rows"]] == [
            (r["policy"], r["success_rate"], r["episodes"]) for r in done["variants"][name]["rows"]]
    searched = lambda c: any(c[k].startswith(("BoN-", "beam-")) for k in ("a", "b"))  # noqa: E731 (sweep search rows)
    assert [c for c in done["comparisons"] if not searched(c)] == rebuilt["comparisons"]
    assert any("+beam" in c["a"] for c in rebuilt["comparisons"])   # the loop's own search rows are kept


def test_a_users_file_where_an_outcome_file_would_go_is_refused_before_any_run(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep", Path(__file__).parents[1] / "scripts" / "sweep.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    mine = tmp_path / "o" / "grpo-seed1.parquet"
    mine.parent.mkdir()
    mine.write_bytes(b"the user's own bytes")
    path = tmp_path / "sweep.yaml"
    path.write_text("base: {iterations: 1}\nvariants: {agentprm: {}, grpo: {algo: grpo}}\n")
    with pytest.raises(SystemExit) as stop:
        script.main(["--config", str(path), "--seeds", "0", "1", "--out", str(tmp_path / "out"),
                     "--outcomes", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "\n" not in err and f"--outcomes {mine}: exists and agentprm did not write it" in err
    assert mine.read_bytes() == b"the user's own bytes" and not (tmp_path / "out").exists()


def fake_results(seed: int, lift: float, draw: int, tasks: int = 30) -> dict:
    """A finished run's results.json in miniature: π0 and π2 on `tasks` games of the seed's own eval draw, π2
    winning `lift` more often; `draw` seeds the outcomes."""
    import random
    rng = random.Random(draw)
    rows = []
    for policy, iteration, p in (("pi0", 0, 0.5), ("pi2", 2, 0.5 + lift)):
        per_task = {f"eval-{seed}-{t:03d}": [int(rng.random() < p), 1] for t in range(tasks)}
        wins = sum(w for w, _ in per_task.values())
        rows.append({"policy": policy, "iteration": iteration, "best_of_n": 1, "search": "",
                     "success_rate": wins / tasks, "episodes": tasks, "per_task": per_task})
    return {"rows": rows, "curve": [{"iteration": 0, "env_steps": 0, "kl_to_pi0": 0.0},
                                    {"iteration": 2, "env_steps": 1234 + seed, "kl_to_pi0": 0.1 * (seed + 1)}],
            "config": {"seed": seed}, "provenance": {}}


def test_outcome_files_round_trip_to_the_same_pooled_rows_and_paired_claims(tmp_path):
    """write_outcomes then read_sweep_outcomes give the rows, env steps and hierarchical paired differences of the
    in-memory summary; a seed one variant lacks is left out of every variant."""
    from agentprm.loop.sweep import (read_sweep_outcomes, sweep_comparisons, sweep_markdown, with_env_steps,
                                     write_outcomes)
    from agentprm.data.summary import pooled_rows

    results = {("a", s): fake_results(s, 0.2, s) for s in (0, 1, 2)} | {("b", s): fake_results(s, 0.0, 10 + s)
                                                                         for s in (0, 1)}
    for (name, seed), r in results.items():
        write_outcomes(tmp_path / f"{name}-seed{seed}.parquet", r, name, seed)
    summary, seeds = read_sweep_outcomes(tmp_path)
    assert seeds == [0, 1] and set(summary) == {"a", "b"}
    for name in ("a", "b"):
        per_seed = {s: with_env_steps(results[(name, s)]) for s in seeds}
        assert summary[name]["rows"] == pooled_rows(per_seed)
        assert [[(r["env_steps"], r["kl_to_pi0"], r["per_task"]) for r in summary[name]["per_seed"][s]]
                for s in seeds] == [[(r["env_steps"], r["kl_to_pi0"], r["per_task"]) for r in per_seed[s]] for s in seeds]
    assert [r["kl_to_pi0"] for r in summary["a"]["per_seed"][1]] == [0.0, 0.2]
    table = sweep_markdown("s.yaml", seeds, summary)
    assert "| KL(π ‖ π0) |" in table and "| greedy | 0 | 0.000 |" in table
    assert "| pi2 | greedy | 1,234 | 0.150 |" in table   # pi2 over seeds 0 and 1: mean steps and KL (0.1, 0.2)
    want = sweep_comparisons({n: {"per_seed": {s: with_env_steps(results[(n, s)]) for s in seeds}} for n in "ab"}, "b")
    got = sweep_comparisons(summary, "b")
    assert got == want and {(c["a"], c["b"]) for c in got} >= {("a: pi2", "a: pi0"), ("a: pi2", "b: pi2")}
    assert all(c["seeds"] == 2 for c in got)


def test_outcome_files_refuse_impossible_counts(tmp_path):
    import pyarrow as pa
    from agentprm.data.tables import OUTCOMES_SCHEMA, read_outcomes, write_with_info

    row = {"policy": ["pi0"], "iteration": [0], "best_of_n": [1], "search": [""], "env_steps": [0],
           "task_id": ["t"], "wins": [2], "episodes": [1]}
    path = write_with_info(tmp_path / "x-seed0.parquet", pa.table(row, schema=OUTCOMES_SCHEMA), {})
    with pytest.raises(UserError, match="x-seed0.parquet: column 'wins' exceeds 'episodes'"):
        read_outcomes(path)
    row["wins"], row["episodes"] = [0], [0]
    path = write_with_info(tmp_path / "y-seed0.parquet", pa.table(row, schema=OUTCOMES_SCHEMA), {})
    with pytest.raises(UserError, match="y-seed0.parquet: column 'episodes' holds 0"):
        read_outcomes(path)
