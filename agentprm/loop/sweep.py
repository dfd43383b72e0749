"""Several loop configs (methods or ablation variants) × seeds, each an ordinary resumable run under
<out>/<name>/seed<k>/. The stages a config does exactly as the first config does for the same seed (same tasks, π0,
π0's eval, demos, π0's rollouts) run once and are copied (StageRunner `reuse`), so every variant's iteration 1
starts from the very same data; each run is still charged the copied stages' seconds."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml

from agentprm.errors import UserError
from agentprm.data.summary import pooled_rows
from agentprm.loop.config import LoopConfig, from_dict
from agentprm.loop.run import Loop


def shared_stages(cfg: LoopConfig, first: LoopConfig) -> set[str]:
    """The stages `cfg` may copy from `first`'s run of the same seed: those whose inputs the two configs agree on.
    (`first` is any earlier variant; run_sweep picks the one sharing the most.)"""
    same = lambda *sections: all(getattr(cfg, s) == getattr(first, s) for s in sections)  # noqa: E731
    if cfg.seed != first.seed:
        return set()
    split = lambda c, name: (getattr(c.tasks, name), getattr(c.tasks, f"{name}_dir"), c.tasks.types)  # noqa: E731
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
    return names


def _playing(cfg: LoopConfig) -> tuple:
    r = cfg.rollout
    return r.mode, r.num_envs, r.workers


def run_sweep(configs: dict[str, LoopConfig], seeds: list[int], out: Path, resume: bool) -> dict[str, dict]:
    """name -> {"rows": rows pooled over seeds, "per_seed": each seed's own rows (with per-task outcomes, for paired
    comparisons), "wall_seconds": the runs' stage seconds summed over seeds, "own_seconds": the same without the
    stages it shares with the first config (for the first: with itself), demos excepted}."""
    first = next(iter(configs))
    summary = {}
    for k, (name, base) in enumerate(configs.items()):
        per_seed, wall, own = {}, 0.0, 0.0
        for seed in seeds:
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
            per_seed[seed] = results["rows"]
            wall += sum(results["stage_seconds"].values())
            # demos count as the method's own: only the methods that learn from demos pay for them
            own += sum(s for stage, s in results["stage_seconds"].items() if stage not in shared - {"demos"})
        summary[name] = {"rows": pooled_rows(per_seed), "per_seed": per_seed, "wall_seconds": round(wall, 1),
                         "own_seconds": round(own, 1)}
    return summary


def load_variants(path: str | Path) -> dict[str, LoopConfig]:
    """A sweep file: `base:` (a loop config) and `variants:` (name -> fields overriding the base, merged section by
    section). Errors name the file and the variant's field."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such sweep file")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not isinstance(data.get("variants"), dict) or not data["variants"]:
        raise UserError(f"{path}: field 'variants' must be a non-empty mapping of name -> config overrides")
    base = data.get("base") or {}
    return {name: from_dict(_merged(base, over or {}), f"{path}: variants.{name}")
            for name, over in data["variants"].items()}


def _merged(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _merged(base[key], value) if both else value
    return merged
