"""How much can one policy update from π0's own Q carry to unseen games? Ceilings for a finished AgentPRM run.

    python scripts/update_ceiling.py --run runs/scale/continuation-240/seed0

The run must have used continuation targets (`targets.source: continuation`), so that its stage-1 file holds exact
Q^{greedy π0}(s, a) for π0's top commands at sampled rollout states (targets/continuation.py). Rows, all greedy on
the run's eval split and paired with its π0 (bootstrap over tasks, eval/paired.py):

- the run's own π1 (kl-distill against its PRM Q1 on all rollout states);
- kl-distill of π0 against **the labels themselves** (a lookup-table critic: exact Q^π0 where it was measured) on the
  labelled states — the update's bound with a perfect critic on those states — and against Q1 on the same states,
  so the two differ only in the critic;
- the same with labels at states of π0's *failed greedy* episodes on the train tasks (where a correction turns a
  loss into a win), and with both label sets together;
- π0 with the receptacles that cannot hold the task's object masked while it searches (ALFRED's
  `VAL_RECEPTACLE_OBJECTS`): what the one generalisable search prior is worth;
- the hand-coded expert under the same 30-step budget: what imitation error costs π0.

Each kl-distill row takes `--epochs` passes over its states (batch 16, the run's β and lr, seed = run seed + 1 as
the loop's update). Every stage is resumable (<run>/ceiling/, StageRunner); results go to <run>/ceiling.{md,json}.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from functools import cache
from pathlib import Path

import torch

from agentprm.agent.lm import LMAgent
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.config import load_config
from agentprm.loop.stages import StageRunner


class TableCritic:
    """Exact Q where stage 1 measured it: the labels as a critic (scores a pair it has no label for as 0 and counts
    it; the rows below only ask for labelled pairs)."""
    name = "labels"

    def __init__(self, states, actions, q):
        self.values = {(s.key(), a): v for s, a, v in zip(states, actions, q)}
        self.missing = 0

    def score(self, states, replies) -> torch.Tensor:
        out = []
        for s, r in zip(states, replies):
            self.missing += (s.key(), r) not in self.values
            out.append(self.values.get((s.key(), r), 0.0))
        return torch.tensor(out, dtype=torch.float32)


@cache
def _hosts() -> dict[str, frozenset[str]]:
    """Object type (lower case, as in the game text) -> receptacle types that can hold it."""
    from agentprm.envs.alfworld.setup import import_alfworld

    import_alfworld()
    import alfworld.gen.constants as C

    hosts: dict[str, set[str]] = {}
    for receptacle, objects in C.VAL_RECEPTACLE_OBJECTS.items():
        for obj in objects:
            hosts.setdefault(obj.lower(), set()).add(receptacle.lower())
    return {k: frozenset(v) for k, v in hosts.items()}


def cannot_hold(state, command: str) -> bool:
    """`go to X` while searching (hands empty) where X's type can never hold the task's object."""
    goal = state.goal
    if goal is None or state.holding or not command.startswith("go to "):
        return False
    hosts = _hosts().get(goal.obj)
    return hosts is not None and command[len("go to "):].rsplit(" ", 1)[0] not in hosts


class PriorMasked(LMAgent):
    """π0 choosing only among commands that do not search a receptacle that cannot hold the object."""

    def sample(self, states, turns, n, steered=None):
        masked = [dataclasses.replace(s, admissible=tuple(a for a in s.admissible if not cannot_hold(s, a))
                                      or s.admissible) for s in states]
        return super().sample(masked, turns, n, steered)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--failed-states", type=int, default=800, help="labelled states of failed greedy episodes")
    ap.add_argument("--epochs", type=float, default=2.0, help="passes of each kl-distill over its states")
    args = ap.parse_args()

    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.policies import ExpertAgent
    from agentprm.data.tables import read_targets, write_with_info
    from agentprm.data.trajectories import write_episodes_file
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.eval.play import EvalPlay, play_eval
    from agentprm.policy.config import PolicyUpdateConfig
    from agentprm.policy.update import UpdateContext, run_update
    from agentprm.prm.loading import load_prm
    from agentprm.rollout.play import play_tasks
    from agentprm.targets.continuation import continuation_targets
    from agentprm.targets.mc import load_states

    run = args.run
    cfg = load_config(run / "config.yaml")
    if cfg.targets.source != "continuation":
        raise SystemExit(f"{run}: needs a run with targets.source continuation (has {cfg.targets.source!r})")
    stages = StageRunner(run / "ceiling", resume=True)
    train, evals = load_tasks(run / "tasks/train"), load_tasks(run / "tasks/eval")
    pi0, seed, r, e = run / "policy_0", cfg.seed, cfg.rollout, cfg.eval

    def evaluate(name: str, make_agent) -> dict:
        def build(out: Path) -> None:
            how = EvalPlay(e.episodes_per_task, e.max_steps, seed + 1000, r.num_envs, r.workers)
            _, summary = play_eval(make_agent(), evals, how, tag=f"eval-{name}")
            write_json(out, summary)
        return json.loads(stages.run(f"eval_{name}", f"evals/{name}.json", build).read_text())

    # labels at the states of π0's failed greedy episodes on the train tasks
    def failed_episodes(out: Path) -> None:
        episodes, _ = play_tasks(LMAgent.load(pi0, mode=r.mode, seed=seed), train, per_task=1, seed=seed,
                                 max_steps=r.max_steps, tag="greedy", num_envs=r.num_envs, workers=r.workers)
        write_episodes_file(out, [ep for ep in episodes if not ep.won and not ep.error])
    failed_eps = stages.run("greedy_failed", "greedy_failed.parquet", failed_episodes)

    def failed_labels(out: Path) -> None:
        t = continuation_targets(failed_eps, train, pi0, gamma=cfg.targets.gamma, max_steps=r.max_steps,
                                 states=args.failed_states, candidates=cfg.targets.continuation_candidates,
                                 seed=seed + 1, mode=r.mode, num_envs=r.num_envs, workers=r.workers)
        write_with_info(out, t.table, t.info)
    failed = stages.run("failed_labels", "failed_labels.parquet", failed_labels)

    label_sets = {}
    for name, path in (("rollout", run / "iter_1/targets.parquet"), ("failed", failed)):
        t = read_targets(path)
        label_sets[name] = (load_states(t), t.table["action"].to_pylist(), t.table["q"].to_pylist())
    label_sets["both"] = tuple(sum((list(label_sets[k][j]) for k in ("rollout", "failed")), []) for j in range(3))

    def update(name: str, labels: str, critic: str) -> Path:
        states, actions, q = label_sets[labels]
        unique = list({s.key(): s for s in states}.values())

        def build(out: Path) -> None:
            policy = LMAgent.load(pi0, mode=r.mode, seed=seed + 1, name=name)
            judge = TableCritic(states, actions, q) if critic == "labels" else load_prm(run / "iter_1/prm")
            steps = math.ceil(args.epochs * len(unique) / 16)
            p = dataclasses.replace(cfg.policy, method="kl-distill", steps=steps, batch_size=16)
            result = run_update(policy, judge, unique, p, UpdateContext(seed + 1, str(pi0), progress=False))
            result.details.update(states=len(unique), labels=labels, critic=critic,
                                  missing_labels=getattr(judge, "missing", None))
            save_policy(policy.backend.model, policy.tokenizer, out, policy.prompt_cfg, **result.meta())
        return stages.run(f"policy_{name}", f"policies/{name}", build)

    rows = {"pi0": json.loads((run / "evals/pi0.json").read_text()),
            "pi1 (Q1, all rollout states)": json.loads((run / "evals/pi1.json").read_text())}
    for label, labels, critic in (("labels, rollout states", "rollout", "labels"),
                                  ("Q1, rollout states", "rollout", "prm"),
                                  ("labels, failed greedy states", "failed", "labels"),
                                  ("labels, both", "both", "labels")):
        name = label.replace(", ", "_").replace(" ", "-")
        folder = update(name, labels, critic)
        rows[f"kl-distill: {label}"] = evaluate(name, lambda f=folder: LMAgent.load(f, mode=r.mode, seed=seed))
    rows["pi0, prior-masked search"] = evaluate("pi0_prior_masked", lambda: PriorMasked.load(pi0, mode=r.mode,
                                                                                             seed=seed))
    rows["expert"] = evaluate("expert", ExpertAgent)

    diffs = []
    for name, summary in rows.items():
        if name == "pi0":
            continue
        d = paired_difference({seed: summary["per_task"]}, {seed: rows["pi0"]["per_task"]})
        diffs.append({"a": name, "b": "pi0", **d})
    labels_info = {k: len({s.key() for s in v[0]}) for k, v in label_sets.items()}
    md = ["| row | success % | episodes |", "|---|---|---|"]
    md += [f"| {k} | {100 * v['success_rate']:.1f} | {v['episodes']} |" for k, v in rows.items()]
    md += ["", comparisons_table(diffs), "", f"labelled states: {labels_info}"]
    write_text(run / "ceiling.md", "\n".join(md) + "\n")
    write_json(run / "ceiling.json", {"rows": {k: {x: v[x] for x in ("success_rate", "ci95", "episodes")}
                                               for k, v in rows.items()}, "comparisons": diffs,
                                      "labelled_states": labels_info,
                                      "provenance": provenance(vars(args) | {"run": str(run)}, seed)})
    print("\n".join(md))


if __name__ == "__main__":
    main()
