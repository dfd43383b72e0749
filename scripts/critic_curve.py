"""The critic's learning curve: how well a PRM ranks π0's own alternatives at one state on games it never
saw, as a function of distinct train tasks (and so rollouts), the PRM's objective and its capacity.

    python scripts/critic_curve.py --out runs/curve --tasks 48 240 1000 --seeds 0 1

- **Held-out truth.** π0 (the bundled policy) plays `--eval-tasks` games of the eval split greedily (its floor plans
  are disjoint from the train split's); `--states` of the states it visits (two or more admissible commands) are
  sampled, and at each π0's top-4 commands are labelled Q^π0 by a greedy continuation of π0 in the simulator
  (rollout/oracle.py; exact, the engine being deterministic), discounted from the turn like the MC targets.
- **Train data.** π0's stage-1 rollouts (T 1, `--per-task` per game) on the first n games of the train split. Game k
  does not depend on the split's size and every point's rollouts are kept in one shard folder that grows block by
  block, so the points are nested: the 240-game point holds the 48-game point's rollouts.
- **A point** (n, variant, seed): MC targets at γ on those rollouts (targets/mc.py), a PRM trained on all of them
  (prm/train.py; the variant names the loss, the init and the epochs), scored on the held-out states: pairwise
  accuracy over the pairs the oracle separates, mean per-state Spearman, and a 95% bootstrap CI over held-out
  states for the accuracy. The train-side same-state accuracy (its own targets) is kept beside it: the gap is the
  generalisation the curve is about.

- **Capacity at equal data** (the `*-tiny` and `*-small` variants): one backbone per preset size (0.52 M and 4.29 M
  parameters), each SFT'd by π0's recipe on the same expert demos (the first GAMES train games of `--backbone GAMES
  STEPS`) for the same STEPS steps. `order-<size>` ranks a state's commands by the backbone's own log π(a|s) (no
  critic trained); `cont-plackett-luce[-prior]-<size>` is the listwise critic on continuation labels initialised
  from it (with it as the prior).
- **The critic's inputs** (`cont-plackett-luce[-prior]-h8` / `-adm`): the same listwise critic reading more of the
  state than π0's prompt shows — all eight earlier turns a state keeps instead of two, or the admissible commands
  listed (PrmConfig.history_turns / show_admissible); the prior, where there is one, reads π0's own prompt. And
  `-wm`: the critic initialised from a world model (π0 trained to predict each rollout command's next observation).
- **What the held-out pairs turn on**: the oracle's ordered pairs split by how many of the two commands *search* (go
  to or open a receptacle whose contents the state has not shown), each ranker's accuracy per kind, and the layout
  prior (where object types start, counted from the train games' PDDL) as the ranker of two searches.

Every stage is resumable (StageRunner under --out): a rerun with a larger --tasks list plays only the new games'
rollouts and trains only the new points. Results: <out>/curve.json and <out>/curve.md (and curve.png).
`--score PRM [PRM ...]` scores PRMs trained elsewhere on the same held-out states (e.g. bench/iteration_cost.py's
10k-rollout Q1) and prints their row beside π0's own order and the first PRM given, paired, training nothing (on a
fresh --out it builds the held-out set first; a folder that is not a PRM is refused before that). A comma-joined
PRM, `A_s0,A_s1`, is one critic trained with several seeds: its row pools them, paired seed by seed with the first
critic's. `--layout-games DIR --tasks 240 1000 3000`
prints the layout prior's data axis: the search–search pairs ranked by where object types start in the first n games
of DIR (e.g. runs/train-3000 of `agentprm tasks generate`), at each n, training nothing.
"""
from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentprm.agent.lm import LMAgent
from agentprm.agent.replay import episode_states
from agentprm.agent.state import object_type
from agentprm.data.tables import META_KEY, TARGETS_SCHEMA, write_with_info
from agentprm.data.trajectories import ShardWriter, iter_episodes, read_trajectories
from agentprm.errors import UserError
from agentprm.envs.alfworld.generate import generate_tasks
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.run import DEFAULT_POLICY
from agentprm.loop.stages import StageRunner, run_lock
from agentprm.prm.config import PrmDataConfig
from agentprm.prm.loading import load_prm
from agentprm.prm.metrics import pairwise_accuracy, spearman
from agentprm.prm.train import train_prm
from agentprm.rollout.engine import episode_jobs, run_episodes
from agentprm.rollout.oracle import OracleCritic
from agentprm.rollout.play import play_tasks
from agentprm.search.layout import LayoutPrior, searches, visited
from agentprm.targets.mc import drop_failed_episodes, mc_targets, read_rollout_columns
from agentprm.train.config import TrainConfig

GAMMA, MAX_STEPS, TOP = 0.9, 30, 4          # the quickstart's γ and step budget; π0's top-4 commands per state
PER_TASK = 6                                # the quickstart's rollouts per train game


STATES_PER_GAME = 5                         # continuation labels: states per train game, π0's top 4 at each


@dataclass(frozen=True)
class Variant:
    loss: str
    init: str = "policy"      # "policy" = π0's weights (0.5 M parameters), or a preset trained from scratch
    epochs: float = 2.0
    data: str = "mc"          # "mc": MC targets of the rollouts; "continuation": oracle labels of π0's top 4 at
                              # STATES_PER_GAME rollout states per game (same-state alternatives by construction);
                              # "found": the rollouts' search outcomes (found_file)
    prior: float = 0.0        # the PRM's prior_weight: logit f + w · log π0(a|s) (prm/model.py)
    inputs: tuple = ()        # what the critic reads besides π0's prompt: (PromptConfig field, value) pairs


VARIANTS = {   # the quickstart's PRM, and the same-state objective the levers study found ranks best (8 epochs)
    "soft-bce": Variant("soft-bce"),
    "bradley-terry": Variant("bradley-terry", epochs=8.0),
    "soft-bce-small": Variant("soft-bce", init="small"),        # ~4 M parameters, from scratch
    "bradley-terry-prior": Variant("bradley-terry", epochs=8.0, prior=1.0),
    # PQM's comparative loss over each rollout's whole trajectory (prm/pqm.py), the soft-BCE's 2 passes
    "pqm": Variant("pqm"),
    "cont-bradley-terry": Variant("bradley-terry", epochs=8.0, data="continuation"),
    "cont-bradley-terry-prior": Variant("bradley-terry", epochs=8.0, data="continuation", prior=1.0),
    # listwise: each train state's four labelled commands in one Plackett-Luce term set, one packed row
    "cont-plackett-luce": Variant("plackett-luce", epochs=8.0, data="continuation"),
    "cont-plackett-luce-prior": Variant("plackett-luce", epochs=8.0, data="continuation", prior=1.0),
    # 4x the passes: can the 0.5 M critic fit its train states at all, and does fitting them carry to unseen ones?
    "cont-plackett-luce-prior-e32": Variant("plackett-luce", epochs=32.0, data="continuation", prior=1.0),
    # capacity at equal data: backbones SFT'd by π0's recipe at two sizes on the same demos (`backbone`), each ranking
    # by its own policy ("order": log π(a|s), no critic trained) and as the critic's init (with its own prior)
    **{f"{kind}-{size}": Variant(loss, epochs=8.0, data="continuation", prior=prior, init=f"backbone:{size}")
       for size in ("tiny", "small")
       for kind, loss, prior in (("order", "order", 0.0), ("cont-plackett-luce", "plackett-luce", 0.0),
                                 ("cont-plackett-luce-prior", "plackett-luce", 1.0))},
    # a critic that reads a world model: π0 trained further to predict each rollout transition's next observation
    # (what a receptacle holds is what "go to"/"open" reveals), then the listwise critic from it; with the prior, the
    # prior is π0 itself
    "cont-plackett-luce-wm": Variant("plackett-luce", epochs=8.0, data="continuation", init="worldmodel"),
    "cont-plackett-luce-prior-wm": Variant("plackett-luce", epochs=8.0, data="continuation", prior=1.0,
                                           init="worldmodel"),
    # a critic of search outcomes alone: soft-BCE on "did this search show what the task wants" (found_file), the
    # label the layout prior counts — can a critic learn where things tend to be when it is told search by search?
    "found-soft-bce": Variant("soft-bce", data="found"),
    # the critic's inputs (π0's prompt: two earlier turns, no command list): all eight earlier turns the state keeps, or
    # the state's admissible commands listed — with and without π0's prior (which reads π0's own prompt either way)
    **{f"cont-plackett-luce{p}-{tag}": Variant("plackett-luce", epochs=8.0, data="continuation", prior=w, inputs=inputs)
       for p, w in (("", 0.0), ("-prior", 1.0))
       for tag, inputs in (("h8", (("history_turns", 8),)), ("adm", (("show_admissible", True),)))},
}
BACKBONE = (240, 3000)   # the backbones' recipe: expert demos of the first 240 train games, 3,000 SFT steps at any size


def heldout(stages: StageRunner, eval_tasks: int, n_states: int, workers: int | None) -> Path:
    """Greedy π0 episodes on eval games, sampled states, π0's top-4 commands there and their oracle Q^π0."""
    def build(out: Path) -> None:
        tasks = generate_tasks(out / "tasks", "eval", eval_tasks, 0, workers=workers or 2, progress=False)
        pi0 = LMAgent.load(DEFAULT_POLICY, mode="choose", seed=0, name="pi0")
        with ShardWriter(out / "episodes") as writer:
            episodes, _ = play_tasks(pi0, tasks, per_task=1, seed=2000, max_steps=MAX_STEPS, tag="heldout",
                                     workers=workers, writer=writer, progress=False)
        refs = [(e.episode_id, t, s) for e in episodes for t, (s, _) in enumerate(episode_states(e))
                if len(s.admissible) > 1]
        refs = random.Random(0).sample(refs, min(n_states, len(refs)))
        top = LMAgent.load(DEFAULT_POLICY, mode="choose", distinct=True).sample([s for *_, s in refs],
                                                                               [None] * len(refs), TOP)
        flat = [(ref, a) for ref, cands in zip(refs, top) for a in cands]
        with OracleCritic.greedy(DEFAULT_POLICY, tasks, mode="choose", gamma=GAMMA, max_steps=MAX_STEPS,
                                 workers=workers) as oracle:
            q = oracle.score([s for (*_, s), _ in flat], [a for _, a in flat]).tolist()
            if oracle.errors:
                raise RuntimeError(f"{oracle.errors} oracle continuations hit an env error")
        pq.write_table(pa.table({"episode_id": [r[0] for r, _ in flat], "turn": [r[1] for r, _ in flat],
                                 "state_key": [r[2].key() for r, _ in flat], "action": [a for _, a in flat],
                                 "q_oracle": q}), out / "labels.parquet")
    return stages.run("heldout", "heldout", build)


def load_heldout(folder: Path) -> tuple[list, list[str], np.ndarray]:
    labels = pq.read_table(folder / "labels.parquet").to_pydict()
    wanted = set(zip(labels["episode_id"], labels["turn"]))
    states = {}
    for e in iter_episodes(read_trajectories(folder / "episodes")):
        for t, (s, _) in enumerate(episode_states(e)):
            if (e.episode_id, t) in wanted:
                states[(e.episode_id, t)] = s
    flat = [states[ref] for ref in zip(labels["episode_id"], labels["turn"])]
    assert [s.key() for s in flat] == labels["state_key"], "held-out states replayed differently"
    return flat, labels["action"], np.asarray(labels["q_oracle"])


def train_split(stages: StageRunner, n: int, workers: int | None) -> list:
    folder = stages.run(f"tasks_train_{n}", f"tasks/train-{n}", lambda out: generate_tasks(
        out, "train", n, 0, workers=workers or 2, progress=False))
    return load_tasks(folder)


def play_rollouts(out: Path, tasks: list, per_task: int, workers: int | None) -> None:
    """π0's rollouts of `tasks` into the one growing shard folder; episodes already there are kept (resume)."""
    folder = out / "rollouts"
    done = (set(read_rollout_columns(folder)["episode_id"].to_pylist())
            if folder.is_dir() and any(folder.glob("*.parquet")) else set())
    jobs = [j for j in episode_jobs(tasks, per_task, 0, MAX_STEPS, tag="rollout") if j.episode_id not in done]
    if not jobs:
        return
    pi0 = LMAgent.load(DEFAULT_POLICY, mode="choose", temperature=1.0, seed=len(done), name="pi0")
    with ShardWriter(folder) as writer:
        run_episodes(jobs, pi0, num_envs=16, num_workers=workers, writer=writer, description=f"rollouts {len(tasks)}")


def label_games(out: Path, tasks: list, workers: int | None, block: int = 24) -> None:
    """Oracle labels Q^π0 of π0's top 4 at STATES_PER_GAME states of each game's rollouts (states with two or more
    commands, drawn with the game's own seed, so a game's labels do not depend on the point), into the growing
    folder <out>/labels, one file per block of games [lo, hi) of the train split; blocks already there are kept."""
    folder = out / "labels"
    folder.mkdir(exist_ok=True)
    done = set()
    for f in folder.glob("games-*.parquet"):
        lo, hi = map(int, f.stem.split("-")[1:])
        done.update(range(lo, hi))
    blocks: list[list[int]] = []   # runs of consecutive games not labelled yet, at most `block` each
    for k in range(len(tasks)):
        if k in done:
            continue
        if blocks and blocks[-1][-1] == k - 1 and len(blocks[-1]) < block:
            blocks[-1].append(k)
        else:
            blocks.append([k])
    if not blocks:
        return
    ranker = LMAgent.load(DEFAULT_POLICY, mode="choose", distinct=True)
    for ks in blocks:
        chunk = {tasks[k].task_id: tasks[k] for k in ks}
        by_task: dict[str, dict] = {}
        for e in iter_episodes(read_trajectories(out / "rollouts")):
            if e.task_id in chunk and not e.error:
                for t, (s, _) in enumerate(episode_states(e)):
                    if len(s.admissible) > 1:
                        by_task.setdefault(e.task_id, {}).setdefault(s.key(), (e, t, s))
        refs = [ref for tid in chunk for ref in random.Random(tid).sample(
            sorted(by_task.get(tid, {}).values(), key=lambda v: (v[0].episode_id, v[1])),
            min(STATES_PER_GAME, len(by_task.get(tid, {}))))]
        tops = ranker.sample([s for *_, s in refs], [None] * len(refs), TOP)
        flat = [(ref, a) for ref, top in zip(refs, tops) for a in top]
        with OracleCritic.greedy(DEFAULT_POLICY, list(chunk.values()), mode="choose", gamma=GAMMA,
                                 max_steps=MAX_STEPS, workers=workers) as oracle:
            q = oracle.score([r[2] for r, _ in flat], [a for _, a in flat]).tolist()
            if oracle.errors:
                raise RuntimeError(f"{oracle.errors} oracle continuations hit an env error")
        table = pa.table({"state_key": [r[2].key() for r, _ in flat], "action": [a for _, a in flat], "q": q,
                          "visits": [1] * len(flat), "task_id": [r[0].task_id for r, _ in flat],
                          "task_type": [r[0].task_type for r, _ in flat],
                          "episode_id": [r[0].episode_id for r, _ in flat], "turn": [r[1] for r, _ in flat]},
                         schema=TARGETS_SCHEMA)
        write_with_info(folder / f"games-{ks[0]:05d}-{ks[-1] + 1:05d}.parquet", table,
                        {"kind": "continuation-targets", "rollouts": str((out / "rollouts").resolve())})
        print(f"labelled games {ks[0]}..{ks[-1]}: {len(refs)} states, {len(flat)} continuations", flush=True)


def continuation_file(stages: StageRunner, out: Path, tasks: list, per_task: int, workers: int | None) -> Path:
    """The continuation labels of `tasks`' games as one targets file (the point's train data)."""
    label_games(out, tasks, workers)
    ids = pa.array([t.task_id for t in tasks])

    def build(path: Path) -> None:
        table = pa.concat_tables(pq.read_table(f, schema=TARGETS_SCHEMA) for f in sorted((out / "labels").glob("*.parquet")))
        table = table.filter(pc.is_in(table["task_id"], value_set=ids))
        write_with_info(path, table, {"kind": "continuation-targets", "rollouts": str((out / "rollouts").resolve()),
                                      "gamma": GAMMA, "states": len(pc.unique(table["state_key"])),
                                      "tasks": len(tasks), "per_task": per_task, "candidates": TOP})
    name = tag(len(tasks), per_task)
    return stages.run(f"continuation_{name[1:]}", f"targets/continuation-{name}.parquet", build)


def point_episodes(out: Path, tasks: list, per_task: int):
    """The episodes of a point's rollouts: `tasks`' games, their first `per_task` rollouts, none that errored."""
    ids = {t.task_id for t in tasks}
    for e in iter_episodes(read_trajectories(out / "rollouts")):
        if e.task_id in ids and not e.error and int(e.episode_id.rsplit("-", 1)[1]) < per_task:
            yield e


def found_file(stages: StageRunner, out: Path, tasks: list, per_task: int) -> Path:
    """Search outcomes as targets, free in every rollout: each searching command (`searches`) of the first
    `per_task` rollouts of `tasks`, labelled 1 when the observation it brought shows an object the task wants, else 0
    — a label of where things are, one per search, with no simulator time of its own. The file's info also counts
    them by (wanted object type, receptacle type): `type_counts`, "apple|fridge" -> [found, searches]."""
    def build(path: Path) -> None:
        rows, counts = [], {}
        for e in point_episodes(out, tasks, per_task):
            seen = list(episode_states(e))
            for t, ((state, reply), (after, _)) in enumerate(zip(seen, seen[1:])):
                action = after.commands[-1]
                if searches(state, action):
                    target = visited(action)
                    shown = {object_type(o) for o, r in after.sightings() if r == target}
                    rows.append({"state_key": state.key(), "action": reply, "q": float(bool(shown)), "visits": 1,
                                 "task_id": e.task_id, "task_type": e.task_type, "episode_id": e.episode_id, "turn": t})
                    goal = state.goal
                    for w in ({goal.obj, goal.toggle} - {""} if goal else ()):
                        cell = counts.setdefault(f"{w}|{object_type(target)}", [0, 0])
                        cell[0] += w in shown or f"{w}sliced" in shown
                        cell[1] += 1
        table = pa.Table.from_pylist(rows, schema=TARGETS_SCHEMA)
        write_with_info(path, table, {"kind": "search-outcome-targets", "rollouts": str((out / "rollouts").resolve()),
                                      "tasks": len(tasks), "per_task": per_task,
                                      "found": float(np.mean(table["q"].to_numpy())) if rows else 0.0,
                                      "type_counts": counts})
    name = tag(len(tasks), per_task)
    return stages.run(f"found_{name[1:]}", f"targets/found-{name}.parquet", build)


def tag(n: int, per_task: int) -> str:
    """A point's name: n games, and the rollouts per game where they are not the default's."""
    return f"n{n}" if per_task == PER_TASK else f"n{n}_k{per_task}"


def targets(stages: StageRunner, out: Path, tasks: list, per_task: int) -> Path:
    """MC targets of the first `per_task` rollouts (repeat index k < per_task) of each of `tasks`."""
    ids = pa.array([t.task_id for t in tasks])

    def build(path: Path) -> None:
        table = read_rollout_columns(out / "rollouts")
        table = table.filter(pc.is_in(table["task_id"], value_set=ids))
        repeat = np.array([int(e.rsplit("-", 1)[1]) for e in table["episode_id"].to_pylist()], dtype=np.int64)
        table = table.filter(pa.array(repeat < per_task))
        kept = drop_failed_episodes(table)
        write_with_info(path, mc_targets(kept, GAMMA), {
            "kind": "mc-targets", "rollouts": str((out / "rollouts").resolve()), "gamma": GAMMA,
            "episodes": len(pc.unique(kept["episode_id"])), "steps": kept.num_rows, "tasks": len(tasks), "per_task": per_task})
    name = tag(len(tasks), per_task)
    return stages.run(f"targets_{name[1:]}", f"targets/{name}.parquet", build)


def ranking(pred: np.ndarray, truth: np.ndarray, groups: list[str], boot: int = 2000) -> dict:
    """Same-state pairwise accuracy with a bootstrap CI over states, and the mean per-state Spearman."""
    acc, pairs = pairwise_accuracy(pred.tolist(), truth.tolist(), groups)
    by_state: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by_state.setdefault(g, []).append(i)
    right, count, rhos = [], [], []
    for idx in by_state.values():
        a, n = pairwise_accuracy(pred[idx].tolist(), truth[idx].tolist(), [""] * len(idx))
        right.append((a or 0.0) * n)
        count.append(n)
        rho = spearman(pred[idx], truth[idx])
        if rho is not None:
            rhos.append(rho)
    right, count = np.asarray(right), np.asarray(count)
    draw = np.random.default_rng(0).integers(0, len(count), (boot, len(count)))
    sample = right[draw].sum(1) / np.maximum(count[draw].sum(1), 1)
    return {"pairwise_accuracy": acc, "pairs": pairs, "ci95": [float(np.quantile(sample, 0.025)),
                                                                float(np.quantile(sample, 0.975))],
            "mean_state_spearman": float(np.mean(rhos)) if rhos else None, "states": len(count),
            "states_separated": int((count > 0).sum()), "state_right": right.tolist(), "state_pairs": count.tolist()}


PAIR_KINDS = ("search–search", "search–other", "other–other")


def by_pair_kind(pred, truth: np.ndarray, states: list, actions: list[str],
                 per_state: bool = False) -> dict[str, list]:
    """[right, pairs] of the oracle's ordered same-state pairs, by how many of the two commands search (PAIR_KINDS):
    where the critic's ranking can come from what the state shows, and where only the hidden layout decides. With
    `per_state`, [rights, pairs] are arrays over the held-out states (for a bootstrap over states)."""
    rows: dict[str, list[int]] = {}
    for i, s in enumerate(states):
        rows.setdefault(s.key(), []).append(i)
    found = {k: [np.zeros(len(rows)), np.zeros(len(rows), dtype=int)] for k in PAIR_KINDS}
    for at, idx in enumerate(rows.values()):
        for i in idx:
            for j in idx:
                if truth[i] > truth[j]:
                    n = searches(states[i], actions[i]) + searches(states[j], actions[j])
                    cell = found[PAIR_KINDS[2 - n]]
                    cell[0][at] += 1.0 if pred[i] > pred[j] else 0.5 if pred[i] == pred[j] else 0.0
                    cell[1][at] += 1
    return found if per_state else {k: [float(r.sum()), int(n.sum())] for k, (r, n) in found.items()}


def search_pairs_ci(pred, base, held: tuple, boot: int = 2000) -> tuple[list[float], list[float]]:
    """The 95% bootstrap CI (over held-out states) of `pred`'s accuracy on search–search pairs, and of its paired
    difference from `base`'s on the same pairs."""
    states, actions, truth = held
    (ra, n), (rb, _) = (by_pair_kind(p, truth, states, actions, per_state=True)["search–search"] for p in (pred, base))
    draw = np.random.default_rng(0).integers(0, len(n), (boot, len(n)))
    a, b = ra[draw].sum(1) / n[draw].sum(1), rb[draw].sum(1) / n[draw].sum(1)
    return np.quantile(a, [0.025, 0.975]).tolist(), np.quantile(a - b, [0.025, 0.975]).tolist()


def layout_prior(folders: list[Path]) -> dict[tuple[str, str], float]:
    """P(an object of type o starts in a receptacle of type r | the game has both), over games' PDDL problems
    (`game.tw-pddl`; the library's counts, search/layout.py, here unsmoothed): where things tend to be — what a critic
    reading a state could at best know of what a search will find (types lower-cased as the game's text names them:
    "Apple" -> "apple", "SinkBasin" -> "sinkbasin")."""
    counts = LayoutPrior.from_games(folders)
    return {k: counts.placed.get(k, 0) / n for k, n in counts.both.items()}


def layout_scores(prior: dict[tuple[str, str], float], states: list, actions: list[str]) -> list[float]:
    """A searching command's chance, by `layout_prior`, that the receptacle's type holds what the task asks for (its
    object, or its lamp); 0 for a command that does not search. Meant for pairs of two searching commands only."""
    found = []
    for s, a in zip(states, actions):
        wanted = {s.goal.obj, s.goal.toggle} - {""} if s.goal else set()
        found.append(max((prior.get((w, object_type(visited(a))), 0.0) for w in wanted), default=0.0)
                     if searches(s, a) else 0.0)
    return found


def backbone(stages: StageRunner, size: str, recipe: tuple[int, int], workers: int | None) -> Path:
    """π0's recipe at the preset `size`: SFT for `steps` steps (batch 16, one renumbered copy, seed 0) on the expert
    demos of the first `games` train games (`recipe` = (games, steps)) — the same demos and steps at every size, so
    the backbones differ in capacity only. Stages: the demos once per recipe, then one SFT per size."""
    from agentprm.cli import run_command

    games, steps = recipe
    train_split(stages, games, workers)
    demos = stages.run(f"demos_{games}", f"backbones/demos-train-{games}.parquet", lambda path: run_command(
        "demos", "--tasks", stages.run_dir / f"tasks/train-{games}", "--out", path, "--max-steps", 50,
        "--workers", 1, "--seed", 0))
    return stages.run(f"backbone_{size}_g{games}_s{steps}", f"backbones/{size}-g{games}-s{steps}", lambda path:
                      run_command("sft", "--demos", demos, "--out", path, "--model", size, "--steps", steps,
                                  "--renumber-copies", 1, "--threads", 1, "--val-frac", 0, "--seed", 0))


def world_model(stages: StageRunner, out: Path, tasks: list, per_task: int) -> Path:
    """π0 trained one more epoch to predict, after each rollout turn's prompt and command, the observation that came
    back (policy/sft.py's loss on the observation's tokens only): across games the next observation shows where
    things tend to be, the layout knowledge a searching command's value turns on (whether the critic then uses it is
    what the -wm variants measure). Built on the point's own rollouts."""
    from agentprm.agent.encoding import PromptConfig, prompt_ids, reply_ids
    from agentprm.models.presets import load_causal_lm, load_tokenizer
    from agentprm.policy.sft import IGNORE, Example, sft_loss
    from agentprm.train.core import train

    def build(folder: Path) -> None:
        tokenizer, prompt = load_tokenizer(DEFAULT_POLICY), PromptConfig.load(DEFAULT_POLICY)
        examples = []
        for e in point_episodes(out, tasks, per_task):
            for (state, reply), after in zip(episode_states(e), e.steps[1:]):   # the observation a reply brought
                head = prompt_ids(tokenizer, state, prompt) + reply_ids(tokenizer, reply)
                seen = tokenizer(after.observation, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                examples.append(Example(head + seen, [IGNORE] * len(head) + seen))
        model = load_causal_lm(DEFAULT_POLICY)
        train(model, examples, sft_loss, TrainConfig(epochs=1.0, lr=5e-4, batch_size=16, seed=0),
              description="world model", progress=False, length=lambda ex: len(ex.input_ids))
        folder.mkdir(parents=True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        prompt.save(folder, kind="policy", world_model={"examples": len(examples), "tasks": len(tasks)})
    return stages.run(f"worldmodel_{tag(len(tasks), per_task)[1:]}", f"backbones/worldmodel-{tag(len(tasks), per_task)}",
                      build)


def policy_scores(agent: LMAgent, states: list, actions: list[str]) -> np.ndarray:
    """log π(a | s) of each (state, command) under a policy: its own ranking of the commands, no critic."""
    from agentprm.agent.format import format_reply
    from agentprm.search.policy import log_probs

    return log_probs(agent, states, [format_reply(a) for a in actions]).numpy()


def point(stages: StageRunner, out: Path, tasks: list, per_task: int, name: str, seed: int, held: tuple,
          workers: int | None, recipe: tuple[int, int] = BACKBONE) -> None:
    variant, n = VARIANTS[name], len(tasks)
    init = (str(DEFAULT_POLICY) if variant.init == "policy" else
            str(backbone(stages, variant.init.split(":")[1], recipe, workers)) if variant.init.startswith("backbone:")
            else str(world_model(stages, out, tasks, per_task)) if variant.init == "worldmodel" else variant.init)
    target_file = (None if variant.loss == "order" else targets(stages, out, tasks, per_task) if variant.data == "mc"
                   else found_file(stages, out, tasks, per_task) if variant.data == "found"
                   else continuation_file(stages, out, tasks, per_task, workers))

    def build(folder: Path) -> None:
        states, actions, truth = held
        if variant.loss == "order":
            pred = policy_scores(LMAgent.load(init, mode="choose"), states, actions)
            metrics = {"final": {"train": {"pairwise_accuracy": None, "pairs": 0}}, "examples": 0, "seconds": 0.0}
            folder.mkdir(parents=True)
        else:
            metrics = train_prm(target_file, init, variant.loss, folder / "prm",
                                TrainConfig(epochs=variant.epochs, seed=seed), PrmDataConfig(heldout_frac=0.0),
                                prior_weight=variant.prior, inputs=dict(variant.inputs),
                                prior_policy=DEFAULT_POLICY if variant.init == "worldmodel" else None)
            pred = load_prm(folder / "prm").score(states, actions).numpy()
        write_json(folder / "result.json", {
            "tasks": n, "rollouts": n * per_task, "variant": name, "seed": seed, **ranking(pred, truth, [s.key() for s in states]),
            "train": metrics["final"]["train"], "examples": metrics["examples"], "prm_seconds": metrics["seconds"],
            "pred": pred.tolist()})
    stages.run(f"point_{name}_{tag(n, per_task)}_s{seed}", f"points/{name}/{tag(n, per_task)}/s{seed}", build)


@np.errstate(invalid="ignore")
def pooled(results: list[dict], base: list[dict] | None, boot: int = 2000) -> tuple[float, list, list | None]:
    """Pairwise accuracy pooled over seeds (pairs summed), its 95% bootstrap CI over held-out states (one draw of
    states for every seed), and the paired difference from `base` (the same states and seeds) with its CI. A draw of
    states that holds no pair has no accuracy and is left out (nanquantile; only tiny held-out sets have such)."""
    right = np.array([r["state_right"] for r in results]).sum(0)
    count = np.array([r["state_pairs"] for r in results]).sum(0)
    draw = np.random.default_rng(0).integers(0, len(count), (boot, len(count)))
    acc = lambda rt, c: rt[draw].sum(1) / c[draw].sum(1)  # noqa: E731
    ci = np.nanquantile(acc(right, count), [0.025, 0.975]).tolist()
    if base is None:
        return right.sum() / count.sum(), ci, None
    seeds = {r["seed"] for r in results} & {r["seed"] for r in base}
    pick = lambda rs, key: np.array([r[key] for r in rs if r["seed"] in seeds]).sum(0)  # noqa: E731
    a = acc(pick(results, "state_right"), pick(results, "state_pairs"))
    b = acc(pick(base, "state_right"), pick(base, "state_pairs"))
    point = (pick(results, "state_right").sum() / pick(results, "state_pairs").sum()
             - pick(base, "state_right").sum() / pick(base, "state_pairs").sum())
    return right.sum() / count.sum(), ci, [float(point), *np.nanquantile(a - b, [0.025, 0.975]).tolist()]


INPUT_TAGS = {"h8": "eight earlier turns − two", "adm": "admissible commands listed − not",
              "wm": "from the world model − from π0"}


def variant_pairs(groups: dict[tuple, list[dict]]) -> list[dict]:
    """The paired differences between variants at each point: the small backbone's variant − the tiny one's, each
    critic − its own backbone's order, and a critic with other inputs or init (-h8, -adm, -wm) − the same critic on
    π0's prompt from π0."""
    found = []
    for (name, tasks, rollouts), rows in sorted(groups.items()):
        kind, _, size = name.rpartition("-")
        others = [(f"{kind}-tiny", "small − tiny")] if size == "small" else []
        if size in ("tiny", "small") and kind != "order":
            others.append((f"order-{size}", "critic − its backbone's order"))
        if size in INPUT_TAGS:
            others.append((kind, INPUT_TAGS[size]))
        for base, what in others:
            if (base, tasks, rollouts) in groups:
                _, _, delta = pooled(rows, groups[(base, tasks, rollouts)])
                if delta is not None:
                    found.append({"a": name, "b": base, "what": what, "tasks": tasks, "delta": delta})
    return found


def pair_kind_rows(groups: dict[tuple, list[dict]], held: tuple, order: list[float],
                   search_priors: list[tuple[str, Any, dict[tuple[str, str], float]]]) -> list[dict]:
    """Accuracy by pair kind per point (seeds pooled, points whose predictions are kept), π0's own order first; then
    each (label, train games, prior) of `search_priors` ranking the pairs of two searching commands (layout_scores);
    and, with the first prior's search–search accuracy in place of each ranker's own, what that ranker would score
    had it learned where things tend to be ("with_layout")."""
    states, actions, truth = held
    cell = lambda right, n: [right / n if n else None, n]  # noqa: E731
    rows = [{"variant": "π0's own order (no PRM)", "tasks": "—", "rollouts": "—",
             **{k: cell(*v) for k, v in by_pair_kind(order, truth, states, actions).items()}}]
    searchers = []
    for label, games, prior in search_priors:
        scores = layout_scores(prior, states, actions)
        ci, vs_order = search_pairs_ci(scores, order, held)
        searchers.append({"variant": f"{label} (search–search only)", "tasks": games, "rollouts": "—",
                          "search–search": cell(*by_pair_kind(scores, truth, states, actions)["search–search"]),
                          "search–other": [None, 0], "other–other": [None, 0], "ci95": ci,
                          "delta_vs_pi0_order_ci95": vs_order})
    for (name, tasks, rollouts), results in sorted(groups.items()):
        found = [by_pair_kind(r["pred"], truth, states, actions) for r in results if "pred" in r]
        if found:   # accuracy pooled over seeds, pairs counted per seed
            rows.append({"variant": name, "tasks": tasks, "rollouts": rollouts, **{k: [
                cell(sum(f[k][0] for f in found), sum(f[k][1] for f in found))[0],
                sum(f[k][1] for f in found) // len(found)] for k in PAIR_KINDS}})
    if searchers:
        by = searchers[0]["search–search"]
        for row in rows:
            cells = [by] + [row[k] for k in PAIR_KINDS[1:]]
            n = sum(c[1] for c in cells)
            row["with_layout"] = sum(c[0] * c[1] for c in cells if c[1]) / n if n else None
    return rows[:1] + searchers + rows[1:]


def report(out: Path, held: tuple) -> None:
    """Every point trained so far under `out` (this run's and earlier runs'): one row per seed, and the seeds pooled
    per point with the paired difference from the variant's smallest point."""
    results = []
    for path in sorted((out / "points").glob("*/n*/s*/result.json")):
        r = json.loads(path.read_text())
        if ("state_right" not in r or "pred" not in r) and (path.parent / "prm").is_dir():
            states, actions, truth = held      # points trained before the counts / predictions were kept: scored again
            pred = load_prm(path.parent / "prm").score(states, actions).numpy()
            r.update({k: v for k, v in ranking(pred, truth, [s.key() for s in states]).items()
                      if k in ("state_right", "state_pairs")}, pred=pred.tolist())
        results.append(r)
    fmt = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
    fmt3 = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    # the reference a learned critic must beat: π0's own preference (the candidates are stored in π0's top-4 order)
    states, _, truth = held
    order = stored_order(states)
    prior = ranking(np.asarray(order, dtype=float), truth, [s.key() for s in states])
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["variant"], r["tasks"], r["rollouts"]), []).append(r)
    lines = ["| variant | train games | rollouts | seeds | held-out pairwise acc. (seeds pooled) | 95% CI (states) | "
             "Δ vs the variant's smallest point | paired 95% CI | Δ vs π0's own order | paired 95% CI |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    summary = []
    span = lambda d: f"{d[0]:+.3f} | [{d[1]:+.3f}, {d[2]:+.3f}] |" if d else "— | — |"  # noqa: E731
    for key in sorted(groups):
        smallest = min(k for k in groups if k[0] == key[0])
        acc, ci, delta = pooled(groups[key], groups[smallest] if key != smallest else None)
        _, _, vs_prior = pooled(groups[key], [{**prior, "seed": r["seed"]} for r in groups[key]])
        summary.append({"variant": key[0], "tasks": key[1], "rollouts": key[2], "seeds": len(groups[key]),
                        "pairwise_accuracy": acc, "ci95": ci, "delta_vs": list(smallest[1:]), "delta": delta,
                        "delta_vs_pi0_order": vs_prior})
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {len(groups[key])} | {acc:.3f} | [{ci[0]:.3f}, {ci[1]:.3f}] | "
                     + span(delta) + " " + span(vs_prior))
    lines.append(f"| π0's own order of its top {TOP} (no PRM) | — | — | — | {prior['pairwise_accuracy']:.3f} | "
                 f"[{prior['ci95'][0]:.3f}, {prior['ci95'][1]:.3f}] | — | — | — | — |")
    pairs = variant_pairs(groups)
    if pairs:
        lines += ["", "Variants paired (the same held-out states and seeds):", "",
                  "| A | B | what | train games | Δ pairwise acc. | paired 95% CI |", "|---|---|---|---|---|---|"]
        lines += [f"| {c['a']} | {c['b']} | {c['what']} | {c['tasks']} | {c['delta'][0]:+.3f} | [{c['delta'][1]:+.3f}, "
                  f"{c['delta'][2]:+.3f}] |" for c in pairs]
    train = max(out.glob("tasks/train-*"), key=lambda f: int(f.name.split("-")[1]), default=None)
    games = [f for f in sorted(train.iterdir()) if (f / "game.tw-pddl").is_file()] if train else []   # game order
    counts = sorted({n for n in (24, 48, 120) if n < len(games)} | {len(games)}) if games else []
    search_priors = [("layout prior of the train games", n, layout_prior(games[:n])) for n in reversed(counts)]
    found = max(out.glob("targets/found-*.parquet"), key=lambda f: f.stat().st_size, default=None)
    if found is not None:   # the same ranking from the rollouts' own search outcomes, counted by type (no critic)
        outcomes = json.loads(pq.read_schema(found).metadata[META_KEY]).get("type_counts", {})
        search_priors.append((f"search-outcome counts of {found.stem[6:]}'s rollouts", "—",
                              {tuple(k.split("|")): f / n for k, (f, n) in outcomes.items()}))
    kinds = pair_kind_rows(groups, held, order, search_priors)
    lines += ["", "By pair kind (seeds pooled): a command *searches* when it goes to or opens a receptacle whose contents "
              "the state has not shown; the oracle's order of two searching commands is the hidden layout's.", "",
              "| variant | train games | rollouts | " + " | ".join(f"{k} acc. (pairs)" for k in PAIR_KINDS) +
              " | all pairs, search–search by the layout prior |", "|---|---|---|" + "---|" * (len(PAIR_KINDS) + 1)]
    lines += [f"| {row['variant']} | {row['tasks']} | {row['rollouts']} | " + " | ".join(
        f"{row[k][0]:.3f} ({row[k][1]})" if row[k][1] else "—" for k in PAIR_KINDS) +
        f" | {fmt3(row.get('with_layout'))} |" for row in kinds]
    lines += [""] + [f"{row['variant'].split(' (')[0]}" + (f", {row['tasks']} games" if row["tasks"] != "—" else "") +
                     f": on search–search pairs 95% CI [{row['ci95'][0]:.3f}, "
              f"{row['ci95'][1]:.3f}] (states), minus π0's own order there: paired 95% CI "
              f"[{row['delta_vs_pi0_order_ci95'][0]:+.3f}, {row['delta_vs_pi0_order_ci95'][1]:+.3f}]"
              + "  " for row in kinds if "ci95" in row]
    lines += ["", "| train games | rollouts | variant | seed | examples | held-out pairwise acc. | 95% CI (states) | "
              "per-state Spearman | train pairwise acc. | PRM s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["variant"], r["tasks"], r["rollouts"], r["seed"])):
        lines.append(f"| {r['tasks']} | {r['rollouts']} | {r['variant']} | {r['seed']} | {r['examples']} | "
                     f"{fmt(r['pairwise_accuracy'])} ({r['pairs']} pairs) | [{fmt(r['ci95'][0])}, "
                     f"{fmt(r['ci95'][1])}] | {fmt(r['mean_state_spearman'])} | {fmt(r['train']['pairwise_accuracy'])}"
                     f" ({r['train']['pairs']}) | {r['prm_seconds']:.0f} |")
    write_text(out / "curve.md", "\n".join(lines) + "\n")
    write_json(out / "curve.json", {"pooled": summary, "variant_pairs": pairs, "pair_kinds": kinds, "pi0_order": {k: v for k, v in prior.items()
                                                                       if not k.startswith("state_")}, "points": [{k: v for k, v in r.items() if not
                                                                   k.startswith("state_") and k != "pred"} for r in results],
                                    "provenance": provenance(None, None)})
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.axhline(prior["pairwise_accuracy"], color="black", lw=0.8, ls=":", label=f"π0's own order of its top {TOP}")
    for name in sorted({s["variant"] for s in summary}):
        games = [s for s in summary if s["variant"] == name and s["rollouts"] == PER_TASK * s["tasks"]]
        line = ax.errorbar([s["rollouts"] for s in games], [s["pairwise_accuracy"] for s in games],
                           yerr=np.abs(np.array([s["ci95"] for s in games]).T - [s["pairwise_accuracy"] for s in games]),
                           marker="o", capsize=3, label=f"{name}: more games, {PER_TASK} rollouts each")
        deeper = [s for s in summary if s["variant"] == name and s["rollouts"] != PER_TASK * s["tasks"]]
        if deeper:
            ax.scatter([s["rollouts"] for s in deeper], [s["pairwise_accuracy"] for s in deeper], marker="s",
                       color=line[0].get_color(), label=f"{name}: more rollouts per game")
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="rollouts of π0 (train data)",
           ylabel="held-out same-state pairwise accuracy", title="The critic's learning curve")
    ticks = sorted({s["rollouts"] for s in summary})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])      # the measured budgets, not log-scale minor labels
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)
    lows = [v for v in (*(s["ci95"][0] for s in summary), prior["ci95"][0]) if np.isfinite(v)]
    if lows:   # (a miniature run may have no ordered pair at all: no interval)
        ax.set_ylim(min(lows) - 0.07, None)                # room below the bars for the legend
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=120)


def score_folders(prms: dict[str, list], held: tuple) -> None:
    """PRMs trained elsewhere (a loop's iter_1/prm, bench/iteration_cost.py's 10k-rollout one), by folder (one per
    seed, pooled), on the held-out states, beside π0's own order of the same commands and the first critic given
    (e.g. the same recipe on less data), each paired on the same states and seeds; then the accuracy by pair kind."""
    states, actions, truth = held
    keys = [s.key() for s in states]
    pi0 = policy_scores(LMAgent.load(DEFAULT_POLICY, mode="choose"), states, actions)
    order = {**ranking(pi0, truth, keys), "seed": 0}

    def kinds(preds: list) -> str:   # pooled over seeds: pairs summed
        found = [by_pair_kind(pred, truth, states, actions) for pred in preds]
        return " | ".join(f"{sum(f[k][0] for f in found) / n:.3f}" if (n := sum(f[k][1] for f in found)) else "—"
                          for k in PAIR_KINDS)
    print("| critic | held-out same-state pairwise acc. | 95% CI | Δ vs π0's own order | paired 95% CI | Δ vs the "
          "first critic | paired 95% CI | " + " | ".join(PAIR_KINDS) + " |")
    print("|---|---|---|---|---|---|---|" + "---|" * len(PAIR_KINDS))
    print(f"| π0's own order (no PRM) | {order['pairwise_accuracy']:.3f} | [{order['ci95'][0]:.3f}, "
          f"{order['ci95'][1]:.3f}] | | | | | {kinds([np.asarray(pi0)])} |")
    first = None
    for name, seeds in prms.items():
        preds = [prm.score(states, actions).numpy() for prm in seeds]
        found = [{**ranking(pred, truth, keys), "seed": i} for i, pred in enumerate(preds)]
        acc, ci, (delta, lo, hi) = pooled(found, [{**order, "seed": i} for i in range(len(found))])
        vs_first = ""
        if first is not None:
            _, _, (d, d_lo, d_hi) = pooled(found, first)
            vs_first = f"{d:+.3f} | [{d_lo:+.3f}, {d_hi:+.3f}]"
        first = first or found
        print(f"| {name} | {acc:.3f} | [{ci[0]:.3f}, {ci[1]:.3f}] | {delta:+.3f} | [{lo:+.3f}, {hi:+.3f}] | "
              f"{vs_first or ' | '} | {kinds(preds)} |")


def stored_order(states: list) -> list[float]:
    """π0's own order of the held-out candidates as scores: a state's candidates are stored best first (its top 4,
    in π0's order), each scored by minus its place."""
    place: dict[str, int] = {}
    order = []
    for s in states:
        place[s.key()] = place.get(s.key(), -1) + 1
        order.append(-place[s.key()])
    return order


def layout_curve(games: list[Path], counts: list[int], held: tuple) -> None:
    """The data axis of the one statistic that orders the held-out search–search pairs (docs/studies/critic-curve.md):
    the layout prior counted over the first n of `games` (a train split's game folders in order; game k does not
    depend on the split's size, so these are the curve's own games) at each n, beside π0's own order on the same
    pairs (`pair_kind_rows`), and paired with the smallest n's prior: does seeing more floor plans lift the search
    pairs' ceiling?"""
    states, actions, _ = held
    priors = [("layout prior", n, layout_prior(games[:n])) for n in sorted(counts)]
    own, *rows = pair_kind_rows({}, held, stored_order(states), priors)
    first, first_scores = rows[0]["search–search"][0], layout_scores(priors[0][2], states, actions)
    print(f"| ranker of the search–search pairs | train games | acc. | 95% CI | Δ vs π0's own order (paired 95% CI) | "
          f"Δ vs {priors[0][1]} games (paired 95% CI) |")
    print("|---|---|---|---|---|---|")
    print(f"| π0's own order | — | {own['search–search'][0]:.3f} | | | |")
    for (_, n, prior), row in zip(priors, rows):
        acc, ci, vs_order = row["search–search"][0], row["ci95"], row["delta_vs_pi0_order_ci95"]
        _, vs_first = search_pairs_ci(layout_scores(prior, states, actions), first_scores, held)
        print(f"| layout prior | {n} | {acc:.3f} | [{ci[0]:.3f}, {ci[1]:.3f}] | {acc - own['search–search'][0]:+.3f} "
              f"[{vs_order[0]:+.3f}, {vs_order[1]:+.3f}] | " + (f"{acc - first:+.3f} [{vs_first[0]:+.3f}, "
                                                                f"{vs_first[1]:+.3f}] |" if n != priors[0][1] else "|"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tasks", type=int, nargs="+", default=[48, 240, 1000], help="train games per point (nested)")
    ap.add_argument("--per-task", type=int, default=PER_TASK,
                    help="rollouts of π0 per train game (the first k of each game's, where more were played)")
    ap.add_argument("--variants", nargs="+", default=["soft-bce", "bradley-terry"], choices=sorted(VARIANTS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="PRM seeds (init, data order)")
    ap.add_argument("--eval-tasks", type=int, default=72)
    ap.add_argument("--states", type=int, default=240, help="held-out states labelled by the oracle (240: the "
                    "documented study's held-out set, docs/results.md)")
    ap.add_argument("--workers", type=int, default=None, help="env worker processes (default: CPU count)")
    ap.add_argument("--backbone", type=int, nargs=2, default=list(BACKBONE), metavar=("GAMES", "STEPS"),
                    help="the *-tiny / *-small variants' backbones: SFT on the first GAMES train games' demos for "
                         f"STEPS steps (default {BACKBONE[0]} {BACKBONE[1]})")
    ap.add_argument("--report-only", action="store_true", help="write the tables and plot of the points done")
    ap.add_argument("--score", nargs="+", metavar="PRM", help="score these PRM folders on the held-out states of "
                    "--out (beside π0's own order and the first PRM, paired) and train nothing; A_s0,A_s1 = one "
                    "critic's seeds, pooled")
    ap.add_argument("--layout-games", type=Path, metavar="DIR", help="rank the held-out search–search pairs by the "
                    "layout prior of the first n games of this train split's folder, n each of --tasks, and train "
                    "nothing")
    args = ap.parse_args()
    prms = {}
    for critic in args.score or []:   # loaded first: a wrong folder fails before the held-out set is built
        try:
            prms[critic] = [load_prm(Path(folder)) for folder in critic.split(",")]
        except UserError as e:
            raise SystemExit(f"--score: {e}")
    games = []
    if args.layout_games:   # checked first too: a folder short of games fails before the held-out set is built
        found = sorted(args.layout_games.iterdir()) if args.layout_games.is_dir() else []
        games = [f for f in found if (f / "game.tw-pddl").is_file()]
        if len(games) < max(args.tasks):
            raise SystemExit(f"--layout-games {args.layout_games}: {len(games)} games with a game.tw-pddl, fewer "
                             f"than the {max(args.tasks)} --tasks asks for")
    if args.report_only and not prms:   # (--score goes first, as it always has)
        return report(args.out, load_heldout(args.out / "heldout"))
    args.out.mkdir(parents=True, exist_ok=True)
    with run_lock(args.out):
        stages = StageRunner(args.out, resume=True)
        held = load_heldout(heldout(stages, args.eval_tasks, args.states, args.workers))
        if prms:   # on a fresh --out the held-out set is built first (the same seeded states as the curve's)
            return score_folders(prms, held)
        if games:
            return layout_curve(games, args.tasks, held)
        for n in sorted(args.tasks):
            tasks = train_split(stages, n, args.workers)
            play_rollouts(args.out, tasks, args.per_task, args.workers)
            for name in args.variants:
                for seed in args.seeds:
                    point(stages, args.out, tasks, args.per_task, name, seed, held, args.workers,
                          tuple(args.backbone))
                    report(args.out, held)


if __name__ == "__main__":
    main()
