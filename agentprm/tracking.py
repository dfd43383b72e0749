"""Experiment tracking: `--report-to tensorboard,wandb,mlflow` (Hugging Face's convention) and the loop config's
`tracking:` section, through accelerate's trackers (accelerate.tracking). Optional: each backend is its own package
(`pip install 'agentprm[tracking]'` brings all three); the default, "none", imports none of them.

What is logged, under one run per process:
  - the config and the provenance (flattened to "section.key" parameters), once at the start;
  - live training points every `report_every` optimiser steps of every training (SFT, PRM, policy update), as
    `<scope>/loss`, `<scope>/lr` and the loss's own metrics, where the scope is the loop's stage ("iter_1/prm") or
    the command's description ("PRM soft-bce");
  - each stage's seconds when it completes (`stages/<stage>/seconds`), the PRM's held-out metrics after training
    (`<scope>/heldout/<metric>`), and every eval row (`eval/<row>/success_rate`, its CI and episodes, at the step
    of its iteration).
Steps are the scope's own (a stage's optimiser steps; an eval's iteration). W&B wants one increasing step per run,
so there each scope's step is its own metric (`<scope>/step`, W&B's `define_metric`).

The trackers in use are process-wide while `tracking(...)` is open (`active()`), as a W&B or MLflow run is: the
training core, the PRM trainer and the loop's stages log to it without a tracker threaded through every call."""
from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from agentprm.errors import UserError

BACKENDS = ("tensorboard", "wandb", "mlflow")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


@dataclass
class TrackingConfig:
    report_to: str = "none"     # comma-separated tensorboard, wandb, mlflow; or none
    report_every: int = 10      # optimiser steps between live training points
    project: str = "agentprm"   # the W&B project, the MLflow experiment
    logging_dir: str = ""       # TensorBoard event files, W&B's local files, MLflow's file store; "" = the run
                                # folder's tracking/ (a command without a run folder: ./tracking)

    def backends(self) -> list[str]:
        names = [n.strip() for n in self.report_to.split(",") if n.strip() and n.strip() != "none"]
        for name in names:
            if name not in BACKENDS:
                raise UserError(f"tracking.report_to: {name!r} is not one of none, {', '.join(BACKENDS)}")
        return list(dict.fromkeys(names))

    def check(self) -> None:
        """Bad settings, and a backend whose package is missing, as one line before any work."""
        for name in self.backends():
            if importlib.util.find_spec(PACKAGES[name]) is None:
                raise UserError(f"tracking.report_to: {name} needs the {PACKAGES[name]!r} package "
                                f"(pip install {PACKAGES[name]}, or pip install 'agentprm[tracking]')")

    def to_dict(self) -> dict:
        return asdict(self)


def flat(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"prm": {"lr": 1e-3}} -> {"prm.lr": 1e-3}; lists and None as text (what every backend's parameters take)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


class Tracking:
    """The open trackers of one run (accelerate `GeneralTracker`s): `log(values, step, scope)`."""

    def __init__(self, trackers: list, report_every: int):
        self.trackers, self.report_every = trackers, report_every
        self.scope = ""
        self._wandb_scopes: set[str] = set()

    def log(self, values: dict[str, float], step: int, scope: str | None = None) -> None:
        scope = scope if scope is not None else self.scope
        named = {f"{scope}/{k}" if scope else k: float(v) for k, v in values.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for tracker in self.trackers:
            if tracker.name == "wandb":
                axis = f"{scope or 'run'}/step"
                if axis not in self._wandb_scopes:
                    tracker.run.define_metric(axis)
                    tracker.run.define_metric(f"{scope}/*" if scope else "*", step_metric=axis)
                    self._wandb_scopes.add(axis)
                tracker.log({**named, axis: step})
            else:
                tracker.log(named, step=step)

    @contextmanager
    def scoped(self, scope: str) -> Iterator[None]:
        """Name what is logged inside (a loop stage: "iter_1/prm")."""
        outer, self.scope = self.scope, scope
        try:
            yield
        finally:
            self.scope = outer


_active: Tracking | None = None


def active() -> Tracking | None:
    """The trackers of the `tracking(...)` block this process is in; None when nothing is tracked."""
    return _active


def _open(name: str, cfg: TrackingConfig, logging_dir: Path, run_name: str):
    from accelerate.tracking import MLflowTracker, TensorBoardTracker, WandBTracker

    if name == "tensorboard":
        return TensorBoardTracker(run_name, logging_dir / "tensorboard")
    if name == "wandb":
        return WandBTracker(cfg.project, name=run_name, dir=str(logging_dir))
    import mlflow

    if "MLFLOW_TRACKING_URI" not in os.environ:   # a SQLite store in the logging dir, not a server or ./mlruns
        mlflow.set_tracking_uri(f"sqlite:///{(logging_dir / 'mlflow.db').resolve()}")
    return MLflowTracker(cfg.project, run_name=run_name)


@contextmanager
def tracking(cfg: TrackingConfig, default_dir: Path, run_name: str, config: dict) -> Iterator[Tracking | None]:
    """Open the configured trackers for the block (None when report_to is none), log `config` as parameters, and
    close them when the block ends — however it ends."""
    global _active
    names = cfg.backends()
    if not names:
        yield None
        return
    cfg.check()
    logging_dir = Path(cfg.logging_dir) if cfg.logging_dir else default_dir
    logging_dir.mkdir(parents=True, exist_ok=True)
    trackers = []
    try:
        for name in names:
            tracker = _open(name, cfg, logging_dir, run_name)
            tracker.start()
            tracker.store_init_configuration(flat(config))
            trackers.append(tracker)
        _active = Tracking(trackers, cfg.report_every)
        yield _active
    finally:
        _active = None
        for tracker in trackers:
            tracker.finish()
