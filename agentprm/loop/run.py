"""The training loop, stage by stage, each stage resumable (see stages.py) — the one driver. The iteration body is
the algorithm's recipe (loop/algos/): it gets a narrow IterationContext and returns what it produced; the driver
schedules the iterations and evaluates their results. For AgentPRM (arXiv 2502.10325, Alg. 1):

    tasks → π0 → eval(π0)
    for i in 1..iterations:
        recipe: rollouts of π_{i-1} on iteration i's train tasks → Q-targets (MC, γ from t) → PRM Q_i → online DPO
                π_i vs π_{i-1}
        driver, every `eval.every` iterations and at the last: eval(π_i), Best-of-N / beam (π_i, Q_i)

Iteration i's train tasks are the whole train split, or (`tasks.per_iteration` > 0, the on-policy regime) that many
drawn from it afresh each iteration (`iteration_tasks`). results.json's `curve` is success against the env steps and
the training seconds spent so far.

Run folder: config.yaml (resolved), tasks/, policy_0/, iter_<i>/{rollouts,targets.parquet,prm,policy}/,
evals/*.json, results.json, report.md, plots/*.png.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
from itertools import accumulate
from pathlib import Path

import pyarrow.parquet as pq

from agentprm.agent.policies import ExpertAgent
from agentprm.agent.replicas import ray_replicas
from agentprm.agent.serving import VLLMServer
from agentprm.data.summary import check_env_errors
from agentprm.data.trajectories import (ShardWriter, branch_parent, iter_episodes, read_trajectories,
                                        write_episodes_file)
from agentprm.envs.registry import task_generator
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.pool import configure_pool
from agentprm.errors import UserError
from agentprm.eval.paired import CONTROL, LOGPI, comparisons
from agentprm.io import atomic_leftovers, provenance, write_json, write_text
from agentprm.loop.algos import IterationContext, IterationResult, get_algorithm
from agentprm.loop.config import LoopConfig, dump_config, load_config
from agentprm.loop.stages import MARKERS, StageRunner, generated_train_split, run_lock
from agentprm.models.device import use_device
from agentprm.outputs import check_claimable, claim_folder, overlaps
from agentprm.policy.update import UpdateResult
from agentprm.rollout.branch import branch_jobs
from agentprm.rollout.engine import episode_jobs, run_episodes
from agentprm.rollout.play import play_tasks
from agentprm.rollout.reset import expert_actions, reset_jobs
from agentprm.search.critics import CriticContext, make_critic
from agentprm.tracking import active, tracking

DEFAULT_POLICY = Path(__file__).resolve().parents[1] / "assets" / "policy"
SHARD_ROWS = 2_000   # rollout rows buffered before a shard is written: what a kill can cost (~100 episodes)


SEARCH_ROWS = ("best_of_n", "beam_width", "beam_expand", "critic_control", "policy_control", "every")
"""Eval settings a resumed run may change: they pick which iterations, Best-of-N and beam rows are evaluated."""


class Loop:
    def __init__(self, cfg: LoopConfig, run_dir: str | Path, resume: bool = False, progress: bool = True,
                 reuse: tuple[Path, set[str]] | None = None):
        """`reuse`: stages to copy from another run that did them identically (see StageRunner)."""
        self.algorithm = get_algorithm(cfg.algo).iteration
        self.cfg, self.run_dir, self.progress = cfg, Path(run_dir), progress
        check_claimable(self.run_dir, "run")   # a folder agentprm did not create is refused before anything is written
        for field, folder in (("tasks.train_dir", cfg.tasks.train_dir), ("tasks.eval_dir", cfg.tasks.eval_dir),
                              ("policy0.path", cfg.policy0.path)):
            if folder and overlaps(self.run_dir, Path(folder)):
                raise UserError(f"{self.run_dir}: is, holds or lies inside {field} {folder}; a run writes its own "
                                "folder, never into one it reads — choose another --run-dir")
        started = (self.run_dir / MARKERS).exists()
        if started and not resume:
            raise UserError(f"{self.run_dir}: holds a run already; pass --resume to continue it (nothing deleted)")
        saved = self.run_dir / "config.yaml"
        if resume and saved.exists():
            # compared as parsed configs: sections added by a newer agentprm (at their defaults) do not matter.
            # Raising `iterations` extends a run: the stages done so far are exactly what the longer run does first.
            # `rollout.max_errors` only decides whether a stage that hit env errors may complete.
            before, now = load_config(saved).to_dict(), cfg.to_dict()
            if now["iterations"] >= before["iterations"]:
                before["iterations"] = now["iterations"]
            before["rollout"]["max_errors"] = now["rollout"]["max_errors"]
            for key in ("tracking", "checkpoint_every_s"):   # where the run is reported and how often it saves
                before[key] = now[key]                         # its trainings: not what it computes
            if not (cfg.policy0.retrain or cfg.algo == "sft"):   # π0 is loaded, not trained: its SFT settings (whose
                before["policy0"]["sft"] = now["policy0"]["sft"]  # defaults may change between versions) are unused
            for key in SEARCH_ROWS:   # which test-time search rows to add: each is its own eval stage, named by its
                before["eval"][key] = now["eval"][key]   # N or width x expand, so rows are added or left out, never stale
            if before != now:
                raise UserError(f"{saved}: differs from this run's config; resume with the same config "
                                "(only 'iterations' may grow, to extend the run; 'rollout.max_errors', 'tracking', "
                                "'checkpoint_every_s', "
                                f"{', '.join(f'eval.{k}' for k in SEARCH_ROWS)} may change, and 'policy0.sft' where "
                                "π0 is not trained)")
        claim_folder(self.run_dir, "run")
        self.stages = StageRunner(self.run_dir, resume, reuse, cfg.checkpoint_every_s)
        self.rows: list[dict] = []
        self.update_history: dict[int, list[dict]] = {}
        self.serving = None  # (policy folder, its vLLM server or Ray replicas): load_agent
        self.drift_reference = None  # π0's distributions on its eval states (eval/drift.py), made at the first drift

    # ---------------------------------------------------------------- stages
    def tasks(self) -> tuple[list, list]:
        """(train tasks, the tasks every eval plays): the eval split, or with `tasks.validate` the held-out train games
        (`validation_split`), the eval split then neither generated nor read."""
        c = self.cfg.tasks
        splits = (("train", c.train, c.train_dir),) + ((("eval", c.eval, c.eval_dir),) if not c.validate else ())
        for split, num, given in splits:
            if given is None:
                self.stages.run(f"tasks_{split}", f"tasks/{split}", lambda out, s=split, n=num: task_generator(
                    c.env)(out, s, n, self.cfg.seed, types=c.types, progress=self.progress,
                           workers=self.cfg.rollout.workers or os.cpu_count() or 1))
        train = load_tasks(c.train_dir or self.run_dir / "tasks/train", c.types)
        if c.validate:
            return validation_split(train, c.validate, self.cfg.seed, c.train_dir or self.run_dir / "tasks/train")
        return train, load_tasks(c.eval_dir or self.run_dir / "tasks/eval", c.types)

    def policy0(self, train_tasks) -> Path:
        c = self.cfg.policy0

        def build(out: Path) -> None:
            if c.retrain or (c.path is None and not (DEFAULT_POLICY / "config.json").exists()):
                self._sft(train_tasks, out)
            else:
                from agentprm.models.presets import resolve_model   # (torch)

                src = resolve_model(c.path) if c.path else DEFAULT_POLICY   # a folder or a packaged model's name
                if not (src / "config.json").exists():
                    raise UserError(f"{src}: not a policy folder (no config.json)")
                shutil.copytree(src, out)

        return self.stages.run("policy_0", "policy_0", build)

    def demos(self, tasks, name: str = "demos") -> Path:
        """The hand-coded expert once per task (200-step budget), as the resumable stage <name>.parquet: π0's SFT
        data and InversePRM's positives (of the train tasks)."""
        def build(out: Path) -> None:
            episodes, _ = play_tasks(ExpertAgent(), tasks, per_task=1, seed=self.cfg.seed, max_steps=200,
                                     tag="expert", workers=self.cfg.rollout.workers, progress=self.progress)
            write_episodes_file(out, episodes)

        return self.stages.run(name, f"{name}.parquet", build)

    def _sft(self, train_tasks, out: Path) -> None:
        from agentprm.policy.sft import train_sft

        c, t = self.cfg.policy0, self.cfg.tasks
        demos = self.demos(train_tasks) if not c.demo_tasks else self.demos(generated_train_split(
            self.stages, "demos", t.env, c.demo_tasks, self.cfg.seed, t.types, self.cfg.rollout.workers,
            self.progress), "demos_policy0")
        train_sft(demos, out, c.sft, seed=self.cfg.seed, progress=self.progress)

    def evaluate(self, row, agent, eval_tasks, critic=None, beam: tuple[int, int] | None = None) -> dict:
        """The eval stage evals/<row.stage>.json (its episodes beside it, evals/<row.stage>.parquet) and its results
        row (`row`: eval/play.py EvalRow): `agent()` played greedily, or with `critic()` as Best-of-`row.best_of_n` or
        beam search with `beam` = (width, expand)."""
        from agentprm.eval.play import EvalPlay, play_eval

        c, r = self.cfg.eval, self.cfg.rollout
        how = EvalPlay(c.episodes_per_task, c.max_steps, self.cfg.seed + 1000, r.num_envs, r.workers, self.progress)

        def build(out: Path) -> None:
            episodes, summary = play_eval(agent(), eval_tasks, how, critic=critic() if critic else None,
                                          best_of=1 if beam else row.best_of_n, beam=beam, tag=f"eval-{row.stage}")
            self.check_errors(f"eval_{row.stage}", episodes)
            saved = self.run_dir / "evals" / f"{row.stage}.parquet"   # what the agent did
            for stale in atomic_leftovers(saved):   # a kill inside an earlier attempt's write of it (this stage's)
                if stale.is_file() and not stale.is_symlink():
                    stale.unlink()
            write_episodes_file(saved, episodes)
            write_json(out, summary)

        summary = json.loads(self.stages.run(f"eval_{row.stage}", f"evals/{row.stage}.json", build,
                                             beside=(f"evals/{row.stage}.parquet",)).read_text())
        self.rows.append(row.record(summary))
        if tracker := active():
            tracker.log({"success_rate": summary["success_rate"], "ci95_low": summary["ci95"][0],
                         "ci95_high": summary["ci95"][1], "episodes": summary["episodes"]}, row.iteration,
                        scope=f"eval/{row.stage}")
        return summary

    def check_errors(self, stage: str, episodes) -> None:
        """More than `rollout.max_errors` episodes with an env error fail the stage: it is not marked complete, and
        a resume plays it again."""
        check_env_errors(episodes, self.cfg.rollout.max_errors, f"stage {stage}: ", "set rollout.max_errors: {n}")

    def load_agent(self, policy_dir: Path, **kwargs):
        """π from `policy_dir` as the loop's rollouts and evals play it (with the `decoding` section): in-process, or
        served — through a vLLM server (`backend: openai`; log in serve.log) or by `backend.replicas` Ray actors
        (agent/replicas.py) — by servers this loop starts for the policy and replaces whenever the policy changes, so
        the policy that plays is always the one just trained."""
        from agentprm.agent.lm import LMAgent

        b, kwargs = self.cfg.backend, {"decoding": self.cfg.decoding, **kwargs}
        if b.backend != "openai" and b.replicas == 1:
            return LMAgent.load(policy_dir, **kwargs)
        policy_dir = Path(policy_dir).resolve()
        if self.serving is None or self.serving[0] != policy_dir:
            self.stop_serving()
            self.serving = (policy_dir, self.serve(policy_dir))
        served = self.serving[1]
        if b.backend == "openai":
            return LMAgent.load(policy_dir, backend=dataclasses.replace(b, base_url=served.url), **kwargs)
        return LMAgent.load(policy_dir, backend=served, **kwargs)

    def serve(self, policy_dir: Path):
        """A started vLLM server (`backend: openai`) or the Ray replicas (`backend.replicas`) for one policy."""
        if self.cfg.backend.backend != "openai":
            return ray_replicas(policy_dir, self.cfg.backend.replicas, self.cfg.rollout.ray_address)
        gpu = self.placement[0].type == "cuda"   # then the server shares the trainer's GPU: 40% of its memory
        server = VLLMServer(policy_dir, log=self.run_dir / "serve.log", device="cuda" if gpu else "cpu",
                            dtype="auto" if gpu else "float32",
                            extra_args=("--gpu-memory-utilization", "0.4") if gpu else ())
        server.start()
        return server

    def stop_serving(self) -> None:
        if self.serving is not None:
            self.serving[1].stop()
            self.serving = None

    def batch(self, i: int, train_tasks: list) -> list:
        """Iteration i's train tasks (`tasks.per_iteration`)."""
        return iteration_tasks(train_tasks, self.cfg.tasks.per_iteration, self.cfg.seed, i)

    def context(self, i: int, train_tasks: list) -> IterationContext:
        return IterationContext(i, self.cfg, self.stages, self.batch(i, train_tasks), train_tasks, self.progress,
                                rollouts_of=self.rollouts, demos_of=self.demos,
                                policy0=lambda: self.policy0(train_tasks),
                                batch_of=lambda j: self.batch(j, train_tasks))

    def evaluated(self, i: int) -> bool:
        """Whether iteration i's result is evaluated: every `eval.every` iterations, and the last."""
        return i % self.cfg.eval.every == 0 or i == self.cfg.iterations

    def rollouts(self, i: int, prev: Path, train_tasks, demos=None) -> Path:
        """Stage 1a: `rollout.per_task` episodes of π_{i-1} per train task — with `demos` (expert episodes), an
        `exploration.reset_frac` share of them starting on a demo (Reset-50-50, rollout/reset.py) — then
        `rollout.branches` branch episodes per episode (rollout/branch.py), as Parquet shards."""
        from agentprm.agent.lm import LMAgent

        c, seed, reset = self.cfg.rollout, self.cfg.seed + i, self.cfg.exploration.reset_frac

        def build(out: Path) -> None:
            agent = self.load_agent(prev, mode=c.mode, temperature=c.temperature, seed=seed, name=f"pi{i - 1}")
            tag = f"rollout-{i}"
            if demos is not None and reset > 0:
                jobs = reset_jobs(train_tasks, expert_actions(demos), c.per_task, seed, c.max_steps, tag, reset)
            else:
                jobs = episode_jobs(train_tasks, c.per_task, seed, c.max_steps, tag)
            # a resumed stage: the whole episodes an interrupted attempt flushed are kept, only the others are played
            kept = {e.episode_id: e for e in iter_episodes(read_trajectories(out))} if any(out.glob("*.parquet")) else {}
            if kept and self.progress:
                print(f"iter_{i}/rollouts: resuming with the {len(kept)} episodes its shards hold", flush=True)

            def play(todo: list, description: str) -> list:
                return run_episodes([j for j in todo if j.episode_id not in kept], agent, num_envs=c.num_envs,
                                    num_workers=c.workers, writer=writer, description=description,
                                    progress=self.progress)

            with ShardWriter(out, rows_per_shard=SHARD_ROWS) as writer:
                episodes = sorted([kept[j.episode_id] for j in jobs if j.episode_id in kept] + play(jobs, tag),
                                  key=lambda e: e.episode_id)
                if c.branches:   # branch points are drawn anew: a parent with kept branches keeps just those
                    branched = [e for e in kept.values() if e.origin == "branch"]
                    parents = {branch_parent(e.episode_id) for e in branched}
                    jobs = [j for j in branch_jobs(episodes, train_tasks, agent, c.branches, c.branch_probe, seed,
                                                   c.max_steps) if branch_parent(j.episode_id) not in parents]
                    episodes += sorted(branched + play(jobs, f"branches-{i}"), key=lambda e: e.episode_id)
            self.check_errors(f"iter_{i}/rollouts", episodes)

        return self.stages.run(f"iter_{i}/rollouts", f"iter_{i}/rollouts", build, keep_partial=True)

    def evaluate_iteration(self, i: int, policy_dir: Path, prm_dir: Path | None, eval_tasks) -> None:
        """π_i greedy, then Best-of-N(π_i, Q_i) for every N in `eval.best_of_n` and beam search (π_i, Q_i) with
        `eval.beam_width` × `eval.beam_expand` (when there is a PRM); with `eval.critic_control` each search again
        with a uniform critic in Q_i's place, and with `eval.policy_control` with π_i's own log π in Q_i's place."""
        from agentprm.agent.lm import LMAgent
        from agentprm.eval.play import EvalRow

        mode, seed = self.cfg.rollout.mode, self.cfg.seed + i
        self.evaluate(EvalRow(f"pi{i}", i), lambda: self.load_agent(policy_dir, mode=mode, seed=seed, name=f"pi{i}"),
                      eval_tasks)
        self.drift(i, policy_dir)
        if prm_dir is None:
            return

        def sampler() -> LMAgent:
            return self.load_agent(policy_dir, mode=mode, temperature=self.cfg.eval.bon_temperature, seed=seed,
                                   name=f"pi{i}")

        # logpi scores with π_i's weights in this process, even where π is served
        ctx = CriticContext(seed, prm=prm_dir, policy=policy_dir)
        critics = {"": "prm"}     # row suffix -> the critic's name; "" is Q_i
        if self.cfg.eval.critic_control:
            critics[CONTROL] = "uniform"
        if self.cfg.eval.policy_control:
            critics[LOGPI] = "logpi"
        w, e = self.cfg.eval.beam_width, self.cfg.eval.beam_expand
        for suffix, name in critics.items():
            critic = lambda name=name: make_critic(name, ctx)   # noqa: E731 (built when its row is played)
            for n in self.cfg.eval.best_of_n:
                self.evaluate(EvalRow(f"pi{i}", i, n, f"bon{n}{suffix}" if suffix else ""), sampler, eval_tasks,
                              critic=critic)
            if w:
                self.evaluate(EvalRow(f"pi{i}", i, w * e, f"beam{w}x{e}{suffix}"), sampler, eval_tasks, critic=critic,
                              beam=(w, e))

    def drift(self, i: int, policy_dir: Path) -> None:
        """KL(π_i ‖ π0), π_i's entropy and greedy agreement on the states of π0's greedy eval episodes (eval/drift.py),
        as the stage evals/drift_pi<i>.json: the learning curve's `kl_to_pi0`, beside each evaluated π_i."""
        from agentprm.eval.drift import DriftReference

        episodes = self.run_dir / "evals" / "pi0.parquet"
        if not episodes.is_file():   # (absent where π0's eval was reused from a run that did not copy its episodes)
            return

        def build(out: Path) -> None:
            if self.drift_reference is None:   # π0's side once per process, not once per evaluated iteration
                self.drift_reference = DriftReference.of(self.run_dir / "policy_0", episodes)
            write_json(out, self.drift_reference.measure(policy_dir))

        self.stages.run(f"drift_pi{i}", f"evals/drift_pi{i}.json", build)

    # ---------------------------------------------------------------- driver
    def run(self) -> dict:
        with run_lock(self.run_dir):   # config.yaml is written only by the process that holds the lock
            write_text(self.run_dir / "config.yaml", dump_config(self.cfg))
            try:
                with tracking(self.cfg.tracking, self.run_dir / "tracking", self.run_dir.resolve().name,
                              {**self.cfg.to_dict(), "provenance": provenance(self.cfg.to_dict(), self.cfg.seed)}):
                    return self._run()
            finally:
                self.stop_serving()

    def _run(self) -> dict:
        from agentprm.agent.lm import LMAgent

        self.placement = use_device(self.cfg.device)   # before any model is built: π0, Q_i, the references live there
        configure_pool(self.cfg.rollout.pool, self.cfg.rollout.ray_address)   # where every env worker runs
        start = time.monotonic()
        train_tasks, eval_tasks = self.tasks()
        policy = self.policy0(train_tasks)
        mode = self.cfg.rollout.mode
        from agentprm.eval.play import EvalRow

        self.evaluate(EvalRow("pi0", 0), lambda: self.load_agent(policy, mode=mode, seed=self.cfg.seed, name="pi0"),
                      eval_tasks)
        for i in range(1, self.cfg.iterations + 1):
            result: IterationResult = self.algorithm(self.context(i, train_tasks), policy)
            policy = result.policy
            update = UpdateResult.read(json.loads((policy / "agentprm.json").read_text()))
            self.update_history[i] = update.logged_history() if update else []   # SFT's π_i records no update
            if self.evaluated(i):
                self.evaluate_iteration(i, result.policy, result.critic, eval_tasks)
        results = {"rows": self.rows, "comparisons": comparisons({self.cfg.seed: self.rows}),
                   "curve": learning_curve(self.run_dir, self.rows, self.stages.timings),
                   "wall_seconds": round(time.monotonic() - start, 1),
                   "stage_seconds": self.stages.timings, "config": self.cfg.to_dict(),
                   "provenance": provenance(self.cfg.to_dict(), self.cfg.seed)}
        from agentprm.loop.report import clear_leftovers, write_report

        write_report(self.run_dir, results, self.update_history)
        clear_leftovers(self.run_dir / "results.json")
        write_json(self.run_dir / "results.json", results)   # last: its presence says the report and plots are whole
        return results


def iteration_tasks(pool: list, per_iteration: int, seed: int, i: int) -> list:
    """Iteration i's train tasks: the whole pool when `per_iteration` is 0 or covers it; else `per_iteration` distinct
    tasks. The pool is dealt out in passes, each a fresh seeded shuffle cut into ⌊len(pool) / per_iteration⌋ batches,
    so a task comes back only after every task of its pass had its turn, and one iteration never holds a task twice."""
    if not per_iteration or per_iteration >= len(pool):
        return list(pool)
    per_pass = len(pool) // per_iteration
    npass, k = divmod(i - 1, per_pass)
    order = sorted(pool, key=lambda t: t.task_id)
    random.Random(f"tasks-{seed}-{npass}").shuffle(order)
    return order[k * per_iteration:(k + 1) * per_iteration]


def validation_split(train: list, num: int, seed: int, source: Path | str = "tasks.train_dir") -> tuple[list, list]:
    """(the train tasks left to train on, `num` held out for validation): a seeded draw by task id, so a tuning run's
    evals play train-distribution games that no iteration trains on — hyperparameters are chosen on these, never on
    the eval split."""
    if num >= len(train):
        raise UserError(f"{source}: tasks.validate {num} leaves no game to train on ({len(train)} train games)")
    order = sorted(train, key=lambda t: t.task_id)
    random.Random(f"validate-{seed}").shuffle(order)
    held = {t.task_id for t in order[:num]}
    return [t for t in train if t.task_id not in held], [t for t in train if t.task_id in held]


def rollout_turns(folder: Path) -> int:
    """Env steps a rollout stage played: the turns (rows) of its Parquet shards, from their footers."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(Path(folder).glob("*.parquet")))


def learning_curve(run_dir: Path, rows: list[dict], timings: dict[str, float]) -> list[dict]:
    """Greedy success of every evaluated π_i against what training had spent by then: `env_steps`, the turns its
    iterations' rollouts played (iterations 1..i; branch and continuation plays, and the expert's demos, are not
    counted), and `train_seconds`, the seconds of those iterations' own stages (evals excluded); with how far π_i
    had moved from π0 (`kl_to_pi0`, `greedy_agrees_with_pi0`: evals/drift_pi<i>.json) where measured."""
    greedy = [r for r in rows if r["best_of_n"] == 1 and not r.get("search")]
    last = max((r["iteration"] for r in greedy), default=0)
    turns, own = [0] * (last + 1), [0.0] * (last + 1)   # iteration j's own turns and stage seconds
    for j in range(1, last + 1):
        turns[j] = rollout_turns(run_dir / f"iter_{j}" / "rollouts")
    for name, s in timings.items():
        j = int(name.split("/")[0][5:]) if name.startswith("iter_") else 0
        if 1 <= j <= last:
            own[j] += s
    steps, seconds = list(accumulate(turns)), list(accumulate(own))   # spent by the end of iteration j
    drift = {j: json.loads(p.read_text()) for j in range(1, last + 1)
             if (p := run_dir / "evals" / f"drift_pi{j}.json").is_file()}
    if drift:
        drift[0] = {"kl_to_pi0": 0.0, "greedy_agrees_with_pi0": 1.0}
    return [{"iteration": r["iteration"], "env_steps": steps[r["iteration"]],
             "train_seconds": round(seconds[r["iteration"]], 1), "success_rate": r["success_rate"],
             "ci95": r["ci95"], "episodes": r["episodes"],
             **{k: drift[r["iteration"]][k] for k in ("kl_to_pi0", "greedy_agrees_with_pi0") if r["iteration"] in drift}}
            for r in greedy]
