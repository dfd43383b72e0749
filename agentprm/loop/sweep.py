"""Several loop configs (methods or ablation variants) × seeds, each an ordinary resumable run under
<out>/<name>/seed<k>/. The stages a config does exactly as the first config does for the same seed (same tasks, π0,
π0's eval, demos, π0's rollouts — and, where the targets and PRM sections agree, the targets and Q1) run once and
are copied (StageRunner `reuse`), so every variant's iteration 1
starts from the very same data; each run is still charged the copied stages' seconds."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pyarrow as pa

from agentprm.data.summary import per_seed_cell, pooled_rows, rate_cells, row_key
from agentprm.data.tables import OUTCOMES_SCHEMA, read_outcomes, write_with_info
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.errors import UserError
from agentprm.eval.paired import comparisons, comparisons_table, paired_difference, row_name, search_cell
from agentprm.io import write_json
from agentprm.loop.config import LoopConfig, from_dict, read_yaml
from agentprm.loop.run import Loop
from agentprm.prm.loading import load_prm


def shared_stages(cfg: LoopConfig, first: LoopConfig) -> set[str]:
    """The stages `cfg` may copy from `first`'s run of the same seed: those whose inputs the two configs agree on.
    (`first` is any earlier variant; run_sweep picks the one sharing the most.)"""
    same = lambda *sections: all(getattr(cfg, s) == getattr(first, s) for s in sections)  # noqa: E731
    if cfg.seed != first.seed:
        return set()
    split = lambda c, name: (getattr(c.tasks, name), getattr(c.tasks, f"{name}_dir"), c.tasks.types,  # noqa: E731
                             c.tasks.validate)   # held-out train games: both what trains and what evals play
    train, evals = (split(cfg, n) == split(first, n) for n in ("train", "eval"))
    names = {"tasks_train", "demos"} if train else set()
    if evals:
        names.add("tasks_eval")
    # the bundled or a given π0 does not depend on the train tasks; an SFT-retrained one does
    if same("policy0") and (train or not cfg.policy0.retrain):
        names.add("policy_0")
        # π0's eval reads the eval tasks, the eval section and how episodes are played (mode, envs), not the
        # settings of the train rollouts
        if evals and same("eval") and _playing(cfg) == _playing(first):
            names.add("eval_pi0")
        # Reset-50-50 starts some rollouts on demos: those differ even with equal rollout settings
        if train and same("rollout") and cfg.exploration.reset_frac == first.exploration.reset_frac == 0:
            names.add("iter_1/rollouts")
            # the targets depend on the rollouts, π0, the train tasks and the targets section (and, when
            # shaped, on the value model's PRM settings)
            if (same("targets") and cfg.algo == first.algo == "agentprm"
                    and (cfg.targets.shaping_alpha == 0 or same("prm"))):
                names.add("iter_1/targets")
                if same("prm"):   # Q1: fitted to those targets from π0 with the same settings and seed
                    names.add("iter_1/prm")
    return names


def _playing(cfg: LoopConfig) -> tuple:
    r = cfg.rollout
    return r.mode, r.num_envs, r.workers


def run_sweep(configs: dict[str, LoopConfig], seeds: list[int], out: Path, resume: bool,
              outcomes: Path | None = None) -> dict[str, dict]:
    """name -> {"rows": rows pooled over seeds, "per_seed": each seed's own rows (with per-task outcomes, for paired
    comparisons), "wall_seconds": the runs' stage seconds summed over seeds, "own_seconds": the same without the
    stages it shares with the first config (for the first: with itself), demos excepted}. Seed by seed, every
    variant of a seed before the next seed, so that a sweep stopped part-way has whole seeds to compare. With
    `outcomes`, each finished run's eval outcomes are written to <outcomes>/<name>-seed<k>.parquet (`write_outcomes`)."""
    first = next(iter(configs))
    per_seed: dict[str, dict[int, list[dict]]] = {name: {} for name in configs}
    wall, own = dict.fromkeys(configs, 0.0), dict.fromkeys(configs, 0.0)
    for seed in seeds:
        for k, (name, base) in enumerate(configs.items()):
            cfg, run_dir = dataclasses.replace(base, seed=seed), out / name / f"seed{seed}"
            # copy from the earlier variant that shares the most stages (the first one, unless a later one also
            # agrees on e.g. the targets)
            source = max(list(configs)[:k] or [first], key=lambda other: len(
                shared_stages(cfg, dataclasses.replace(configs[other], seed=seed))))
            shared = shared_stages(cfg, dataclasses.replace(configs[source], seed=seed))
            reuse = None if name == first else (out / source / f"seed{seed}", shared)
            done = run_dir / "results.json"
            results = json.loads(done.read_text()) if done.exists() and resume else None
            if results is None or results["config"] != cfg.to_dict():   # e.g. `iterations` raised: extend the run
                results = Loop(cfg, run_dir, resume, reuse=reuse).run()
            per_seed[name][seed] = with_env_steps(results)
            if outcomes is not None:
                write_outcomes(outcome_path(outcomes, name, seed), results, name, seed)
            wall[name] += sum(results["stage_seconds"].values())
            # demos count as the method's own: only the methods that learn from demos pay for them
            own[name] += sum(s for stage, s in results["stage_seconds"].items() if stage not in shared - {"demos"})
    return {name: {"rows": pooled_rows(per_seed[name]), "per_seed": per_seed[name],
                   "wall_seconds": round(wall[name], 1), "own_seconds": round(own[name], 1)} for name in configs}


def outcome_path(folder: Path, variant: str, seed: int) -> Path:
    return folder / f"{variant or 'run'}-seed{seed}.parquet"


def with_env_steps(results: dict) -> list[dict]:
    """A run's rows, each with the train env steps its policy's run had taken (results.json `curve`; 0 for π0) and,
    where the run measured it, how far that policy had moved from π0 (`kl_to_pi0`, eval/drift.py)."""
    curve = {p["iteration"]: p for p in results.get("curve", [])}
    rows = []
    for r in results["rows"]:
        point = curve.get(r["iteration"], {})
        rows.append({**r, "env_steps": point.get("env_steps", 0 if r["iteration"] == 0 else None),
                     **({"kl_to_pi0": point["kl_to_pi0"]} if "kl_to_pi0" in point else {})})
    return rows


def write_outcomes(path: Path, results: dict, variant: str, seed: int) -> Path:
    """A finished run's eval outcomes per (row, game) as Parquet (data/tables.py OUTCOMES_SCHEMA): the small file a
    study commits so that its tables and CIs can be recomputed (`read_sweep_outcomes`) without the run folders."""
    cols: dict[str, list] = {name: [] for name in OUTCOMES_SCHEMA.names}
    rows = with_env_steps(results)
    for r in rows:
        for task, (wins, n) in sorted(r.get("per_task", {}).items()):
            for name, value in (("policy", r["policy"]), ("iteration", r["iteration"]), ("best_of_n", r["best_of_n"]),
                                ("search", r.get("search", "")), ("env_steps", r["env_steps"] or 0),
                                ("task_id", task), ("wins", wins), ("episodes", n)):
                cols[name].append(value)
    info = {"kind": "eval-outcomes", "variant": variant, "seed": seed, "config": results["config"],
            "provenance": results.get("provenance"),   # KL(π_i ‖ π0) per iteration: a policy's, not a game's
            "kl_to_pi0": {str(r["iteration"]): r["kl_to_pi0"] for r in rows if "kl_to_pi0" in r}}
    return write_with_info(path, pa.table(cols, schema=OUTCOMES_SCHEMA), info)


def read_sweep_outcomes(folder: Path) -> tuple[dict[str, dict], list[int]]:
    """The `run_sweep` summary (rows pooled over seeds, per-seed rows with per-task outcomes; seconds 0: not
    recorded) of every <variant>-seed<k>.parquet under `folder`, and the seeds every variant has. A variant keeps
    only the seeds all variants finished, so pooled rows and paired differences compare like with like."""
    files = sorted(folder.glob("*-seed*.parquet"))
    if not files:
        raise UserError(f"{folder}: no <variant>-seed<k>.parquet outcome files")
    per_seed: dict[str, dict[int, list[dict]]] = {}
    for path in files:
        file = read_outcomes(path)
        name = file.info.get("variant", path.stem.rsplit("-seed", 1)[0])
        seed = int(file.info.get("seed", path.stem.rsplit("-seed", 1)[1]))
        rows: dict[tuple, dict] = {}
        for rec in file.table.to_pylist():
            key = (rec["policy"], rec["iteration"], rec["best_of_n"], rec["search"])
            row = rows.setdefault(key, {"policy": rec["policy"], "iteration": rec["iteration"],
                                        "best_of_n": rec["best_of_n"], "search": rec["search"],
                                        "env_steps": rec["env_steps"], "per_task": {}})
            row["per_task"][rec["task_id"]] = [rec["wins"], rec["episodes"]]
        drift = file.info.get("kl_to_pi0") if isinstance(file.info.get("kl_to_pi0"), dict) else {}
        for row in rows.values():
            if isinstance(drift.get(str(row["iteration"])), (int, float)):
                row["kl_to_pi0"] = drift[str(row["iteration"])]
            wins = sum(w for w, _ in row["per_task"].values())
            row["episodes"] = sum(n for _, n in row["per_task"].values())
            row["success_rate"] = wins / row["episodes"]
        per_seed.setdefault("" if name == "run" else name, {})[seed] = list(rows.values())
    seeds = sorted(set.intersection(*(set(d) for d in per_seed.values())))
    if not seeds:
        raise UserError(f"{folder}: no seed has outcome files for every variant ({', '.join(sorted(per_seed))})")
    return {name: {"rows": pooled_rows({s: d[s] for s in seeds}), "per_seed": {s: d[s] for s in seeds},
                   "wall_seconds": 0.0, "own_seconds": 0.0} for name, d in per_seed.items()}, seeds


PAPER = {("pi0", 1): 64.9, ("pi1", 1): 73.9, ("pi2", 1): 85.8, ("pi3", 1): 88.1, ("pi3", 16): 91.0}
"""(policy, Best-of-N) -> success % in arXiv 2502.10325 (Llama-3.2-3B, official ALFWorld, one seed); its only Best-of-N
number is N = 16 on π3 with Q3."""


@dataclass
class Sweep:
    """A sweep file: `base:` (a loop config file path or an inline config) and `variants:` (name -> fields
    overriding the base, merged section by section); optionally `baseline:` (a variant every variant's last π is
    also compared with, e.g. outcome-only GRPO), `paper: true` (the paper's numbers beside matching rows) and
    `search: {variant, width, expand}` (Best-of-(width·expand) vs beam(width, expand) with that variant's last π
    and Q). A plain loop config is a sweep of one unnamed variant (runs directly under <out>/seed<k>)."""
    variants: dict[str, LoopConfig]
    baseline: str | None = None
    paper: bool = False
    search: dict | None = None


def load_sweep(path: str | Path) -> Sweep:
    """Errors name the file and the field (for a variant: the variant's field)."""
    path = Path(path)
    data = read_yaml(path, "sweep or config")
    if "variants" not in data and "base" not in data:   # a plain loop config
        return Sweep({"": from_dict(data, str(path))})
    unknown = set(data) - {"base", "variants", "baseline", "paper", "search"}
    if unknown:
        raise UserError(f"{path}: unknown field '{sorted(unknown)[0]}' (known: base, variants, baseline, paper, search)")
    if not isinstance(data.get("variants"), dict) or not data["variants"]:
        raise UserError(f"{path}: field 'variants' must be a non-empty mapping of name -> config overrides")
    base = data.get("base") or {}
    if isinstance(base, str):
        if not Path(base).is_file():
            raise UserError(f"{path}: field 'base': no such config file {base!r} (paths are from the repository root)")
        base = read_yaml(base)
    variants = {name: from_dict(_merged(base, over or {}), f"{path}: variants.{name}")
                for name, over in data["variants"].items()}
    search = data.get("search")
    for field_name, name in (("baseline", data.get("baseline")), ("search.variant", (search or {}).get("variant"))):
        if name is not None and name not in variants:
            raise UserError(f"{path}: field '{field_name}': no variant {name!r} (variants: {', '.join(variants)})")
    if search is not None and (set(search) != {"variant", "width", "expand"}
                               or not all(isinstance(search[k], int) and search[k] >= 1 for k in ("width", "expand"))):
        raise UserError(f"{path}: field 'search' must be {{variant: NAME, width: K >= 1, expand: M >= 1}}")
    return Sweep(variants, data.get("baseline"), bool(data.get("paper", False)), search)


def search_rows(cfg: LoopConfig, seeds: list[int], runs: Path, saved: Path, width: int, expand: int,
                resume: bool) -> dict[int, list[dict]]:
    """{seed: [Best-of-(width·expand) row, beam(width, expand) row]} with the last π and Q of the runs under `runs`
    (<runs>/seed<k>), on the runs' eval tasks; each seed's pair is saved to <saved>/seed<k>-<w>x<e>.json (reused with
    `resume`)."""
    from agentprm.agent.lm import LMAgent
    from agentprm.eval.play import EvalPlay, play_eval

    per_seed: dict[int, list[dict]] = {}
    for seed in seeds:
        done = saved / f"seed{seed}-{width}x{expand}.json"
        if resume and done.exists():
            per_seed[seed] = json.loads(done.read_text())
            continue
        run, last = runs / f"seed{seed}", f"iter_{cfg.iterations}"
        tasks = load_tasks(cfg.tasks.eval_dir or run / "tasks/eval", cfg.tasks.types)
        gen = lambda: LMAgent.load(run / last / "policy", mode=cfg.rollout.mode,  # noqa: E731
                                   temperature=cfg.eval.bon_temperature, seed=seed)
        prm = load_prm(run / last / "prm")
        how = EvalPlay(cfg.eval.episodes_per_task, cfg.eval.max_steps, seed + 1000)
        _, bon = play_eval(gen(), tasks, how, critic=prm, best_of=width * expand, tag="bon")
        _, beam = play_eval(gen(), tasks, dataclasses.replace(how, workers=2), critic=prm, beam=(width, expand))
        per_seed[seed] = [{"policy": f"BoN-{width * expand}", "iteration": cfg.iterations, "best_of_n": width * expand,
                           **bon}, {"policy": f"beam-{width}x{expand}", "iteration": cfg.iterations,
                                    "best_of_n": width * expand, **beam}]
        write_json(done, per_seed[seed])
    return per_seed


def sweep_comparisons(summary: dict[str, dict], baseline: str | None = None,
                      search: tuple[str, dict[int, list[dict]]] | None = None) -> list[dict]:
    """The paired differences a sweep's table claims: every variant's own claims (π_i vs π_{i-1} and π0, Best-of-N
    vs its π); every other variant's rows vs the same rows of the reference — `baseline` (e.g. outcome-only GRPO)
    if given, else the first variant; with `search` = (variant, its search rows), Best-of-N and beam vs that
    variant's last π, and beam vs Best-of-N."""
    label = lambda name, r: f"{name}: {row_name(r)}" if name else row_name(r)  # noqa: E731
    out: list[dict] = []

    def add(a: tuple[str, dict[int, dict]], b: tuple[str, dict[int, dict]]) -> None:
        (a_name, ra), (b_name, rb) = a, b
        if a_name == b_name or any(c["a"] == a_name and c["b"] == b_name for c in out) or set(ra) != set(rb):
            return
        if not all(r is not None and "per_task" in r for r in (*ra.values(), *rb.values())):
            return
        out.append({"a": a_name, "b": b_name, "a_best_of_n": next(iter(ra.values()))["best_of_n"],
                    "b_best_of_n": next(iter(rb.values()))["best_of_n"],
                    **paired_difference({s: r["per_task"] for s, r in ra.items()},
                                        {s: r["per_task"] for s, r in rb.items()}, hierarchical=True)})

    def row(name: str, k: tuple) -> tuple[str, dict[int, dict]]:
        per_seed = summary[name]["per_seed"]
        found = {s: next((r for r in rows if row_key(r) == k), None) for s, rows in per_seed.items()}
        return label(name, {"policy": k[0], "best_of_n": k[2], "search": k[3]}), found

    def last(name: str) -> tuple[str, dict[int, dict]]:
        rows = next(iter(summary[name]["per_seed"].values()))
        top = max(r["iteration"] for r in rows)
        return row(name, next(row_key(r) for r in rows if r["iteration"] == top and r["best_of_n"] == 1
                              and not r.get("search")))

    for name, done in summary.items():
        out += [{**c, "a": f"{name}: {c['a']}" if name else c["a"], "b": f"{name}: {c['b']}" if name else c["b"]}
                for c in comparisons(done["per_seed"])]
    reference = baseline if baseline is not None else next(iter(summary))
    for name in summary:
        if name == reference:
            continue
        for r in next(iter(summary[name]["per_seed"].values())):
            if r["iteration"] > 0:
                add(row(name, row_key(r)), row(reference, row_key(r)))
    if search is not None:
        name, per_seed = search
        bon, beam = ((next(iter(per_seed.values()))[k]["policy"], {s: rows[k] for s, rows in per_seed.items()})
                     for k in range(2))
        add(bon, last(name))
        add(beam, last(name))
        add(beam, bon)
    return out


def sweep_markdown(source: str, seeds: list[int], summary: dict[str, dict], paper: Iterable[str] = (),
                   search: list[dict] = (), comps: list[dict] = ()) -> str:
    """The sweep's tables: every row pooled over seeds (the paper's numbers beside the rows of the variants in
    `paper`: those that run AgentPRM), the test-time search rows, the paired differences."""
    paper = set(paper)
    lines = [f"`{source}`, seeds {seeds}; eval success pooled over seeds (Wilson 95% CI); wall s = the runs' stage "
             "seconds summed over seeds; own s = without the stages copied from another variant.", "",
             "| variant | policy | acts by | env steps | KL(π ‖ π0) | success % | 95% CI | episodes | per seed % |"
             + (" paper % |" if paper else "") + " wall s | own s |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if paper else "") + "---|---|"]
    for name, done in summary.items():
        for r in done["rows"]:
            cell = PAPER.get((r["policy"], r["best_of_n"]), "") if name in paper and not r.get("search") else ""
            lines.append(f"| {name or '—'} | {r['policy']} | {search_cell(r)} | "
                         f"{_seed_mean(done, r, 'env_steps', ',.0f')} | {_seed_mean(done, r, 'kl_to_pi0', '.3f')} | "
                         f"{rate_cells(r)} "
                         f"| {per_seed_cell(r)} |" + (f" {cell} |" if paper else "")
                         + f" {done['wall_seconds']:.0f} | {done['own_seconds']:.0f} |")
    if search:
        lines += ["", "| test-time search (samples per turn) | success % | 95% CI | episodes | per seed % |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['policy']} ({r['best_of_n']}) | {rate_cells(r)} | {per_seed_cell(r)} |" for r in search]
    if comps:
        lines += ["", "Paired differences (same eval tasks and seeds; bootstrap over seeds, then tasks within each "
                  "seed — a claim about the training, not only about these runs):", "",
                  comparisons_table(comps)]
    return "\n".join(lines) + "\n"


def _seed_mean(done: dict, r: dict, key: str, spec: str) -> str:
    """A pooled row's policy's `key` (its train env steps, its KL to π0) averaged over seeds ("" where the runs did
    not record it)."""
    values = [x.get(key) for rows in done.get("per_seed", {}).values() for x in rows if row_key(x) == row_key(r)]
    values = [x for x in values if x is not None]
    return format(sum(values) / len(values), spec) if values else ""


def _merged(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _merged(base[key], value) if both else value
    return merged
