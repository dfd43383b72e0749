"""Oracle bounds for finished AgentPRM runs: which part fails, the critic or the update?

    python scripts/oracle_bounds.py --runs runs/cpu/seed0 runs/cpu/seed1 --eval-tasks 72

For each run (iteration 1 done: π0, its rollouts, Q1, π1), with Q_oracle = Q^π0 measured by greedy continuations of
π0 in the simulator (agentprm/rollout/oracle.py), side by side and paired over the same eval tasks:

- test time, on the first `--eval-tasks` eval tasks (every task type alike): π0, BoN-N(π0, Q_oracle) and
  BoN-N(π0, Q1) with the run's own N and sampling temperature — how much a perfect critic of π0 can add, and
  how much of it Q1 delivers;
- the update, on all eval tasks: π1 trained against Q1 (the run's own, online DPO) and, against Q1 and against
  Q_oracle, by online DPO with distinct samples per state (every sampled state gives a pair) and by kl-distill
  (policy/kl_distill.py) — same states, steps, β and seeds as the run's update (policy/update.py);
- Q1 as a critic: on states π0 visits greedily on held-out (eval) tasks, Q1's same-state ranking of π0's top-4
  commands against Q_oracle's (pairwise accuracy over pairs the oracle separates, mean per-state Spearman).

Every stage is resumable (<run>/oracle/, StageRunner); results go to <first run's parent>/oracle_bounds.{md,json}.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path

import numpy as np

from agentprm.agent.lm import LMAgent
from agentprm.data.summary import pooled_rows, rate_cells, restricted
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.eval.play import EvalPlay, play_eval
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.config import load_config
from agentprm.loop.stages import StageRunner
from agentprm.prm.loading import load_prm
from agentprm.prm.metrics import pairwise_accuracy, spearman
from agentprm.rollout.play import play_tasks

RANK_STATES = 150   # held-out states whose candidates Q1 and the oracle both score
# π1 variants trained here (the run's own π1 is "pi1 (Q1)"): label, critic, update method, distinct samples
UPDATES = (("pi1 (Q1, distinct)", "q1", "online-dpo", True),
           ("pi1 (Q_oracle, distinct)", "oracle", "online-dpo", True),
           ("pi1 (Q1, kl-distill)", "q1", "kl-distill", False),
           ("pi1 (Q_oracle, kl-distill)", "oracle", "kl-distill", False))


def subset(tasks, k: int):
    return tasks[:k]  # generated splits go round robin over the task types: a prefix is balanced


def one_run(run: Path, k: int) -> dict:
    from agentprm.agent.checkpoint import save_policy
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.policy.online_dpo import rollout_states
    from agentprm.policy.update import UpdateContext, run_update
    from agentprm.rollout.oracle import OracleCritic

    cfg = load_config(run / "config.yaml")
    stages = StageRunner(run / "oracle", resume=True)
    train, evals = load_tasks(run / "tasks/train"), load_tasks(run / "tasks/eval")
    few = subset(evals, k)
    mode, seed, e = cfg.rollout.mode, cfg.seed, cfg.eval
    pi0, prm1 = run / "policy_0", run / "iter_1/prm"
    n = e.best_of_n[0]

    def oracle(tasks, max_steps):
        return OracleCritic.greedy(pi0, tasks, mode=mode, gamma=cfg.targets.gamma, max_steps=max_steps,
                                   num_envs=cfg.rollout.num_envs, workers=cfg.rollout.workers, seed=seed)

    how = EvalPlay(e.episodes_per_task, e.max_steps, seed + 1000, cfg.rollout.num_envs, cfg.rollout.workers)

    def evaluate(name: str, make_agent, tasks, critic_name: str | None = None) -> dict:
        """`make_agent()` played on `tasks` (the loop's eval settings), as Best-of-N with the named critic if any."""
        def build(out: Path) -> None:
            critics = {"oracle": lambda: oracle(tasks, e.max_steps), "q1": lambda: load_prm(prm1)}
            critic = critics[critic_name]() if critic_name else None
            _, summary = play_eval(make_agent(), tasks, how, critic=critic, best_of=n if critic else 1,
                                   tag=f"eval-{name}")
            if isinstance(critic, OracleCritic):
                summary["oracle_episodes"], summary["oracle_errors"] = critic.episodes, critic.errors
                critic.close()
            write_json(out, summary)
        return json.loads(stages.run(f"eval_{name}", f"evals/{name}.json", build).read_text())

    def sampler():
        return LMAgent.load(pi0, mode=mode, temperature=e.bon_temperature, seed=seed + 1, name="pi0")

    rows = {"pi0 (subset)": restricted(json.loads((run / "evals/pi0.json").read_text()), [t.task_id for t in few]),
            f"BoN-{n}(pi0, Q_oracle)": evaluate(f"pi0_bon{n}_oracle", sampler, few, "oracle"),
            f"BoN-{n}(pi0, Q1)": evaluate(f"pi0_bon{n}_q1", sampler, few, "q1"),
            "pi0": json.loads((run / "evals/pi0.json").read_text()),
            "pi1 (Q1)": json.loads((run / "evals/pi1.json").read_text())}

    states = rollout_states(run / "iter_1/rollouts")
    for label, critic_name, method, distinct in UPDATES:
        folder = f"policy_{critic_name}_{method}{'_distinct' if distinct else ''}"

        def update(out: Path, critic_name=critic_name, method=method, distinct=distinct) -> None:
            policy = LMAgent.load(pi0, mode=mode, seed=seed + 1, name="pi1")
            critic = oracle(train, cfg.rollout.max_steps) if critic_name == "oracle" else load_prm(prm1)
            result = run_update(policy, critic, states, dataclasses.replace(cfg.policy, method=method,
                                                                            distinct=distinct),
                                UpdateContext(seed + 1, str(pi0), progress=False))
            if critic_name == "oracle":
                result.details.update(oracle_episodes=critic.episodes, oracle_errors=critic.errors)
                critic.close()
            save_policy(policy.backend.model, policy.tokenizer, out, policy.prompt_cfg, **result.meta())

        policy_dir = stages.run(folder, folder, update)
        rows[label] = evaluate(folder, lambda d=policy_dir: LMAgent.load(d, mode=mode, seed=seed + 1), evals)

    def rank(out: Path) -> None:
        episodes, _ = play_tasks(LMAgent.load(pi0, mode=mode, seed=seed), few, per_task=1, seed=seed + 2000,
                                 max_steps=e.max_steps, tag="rank", workers=cfg.rollout.workers)
        from agentprm.agent.replay import episode_states

        visited = [s for ep in episodes for s, _ in episode_states(ep) if len(s.admissible) > 1]
        visited = random.Random(seed).sample(visited, min(RANK_STATES, len(visited)))
        top = LMAgent.load(pi0, mode=mode, distinct=True).sample(visited, [None] * len(visited), 4)
        flat = [(s, a) for s, cands in zip(visited, top) for a in cands]
        q1 = load_prm(prm1).score([s for s, _ in flat], [a for _, a in flat]).tolist()
        with oracle(few, e.max_steps) as critic:
            qo = critic.score([s for s, _ in flat], [a for _, a in flat]).tolist()
            errors = critic.errors
        acc, pairs = pairwise_accuracy(q1, qo, [s.key() for s, _ in flat])
        spans = [(i, i + len(c)) for i, c in zip(np.cumsum([0] + [len(c) for c in top[:-1]]), top)]
        per_state = [r for r in (spearman(q1[a:b], qo[a:b]) for a, b in spans) if r is not None]
        write_json(out, {"states": len(visited), "oracle_errors": errors, "pairs": pairs, "pairwise_accuracy": acc,
                         "mean_state_spearman": float(np.mean(per_state)) if per_state else None,
                         "states_with_spearman": len(per_state), "pooled_spearman": spearman(q1, qo),
                         "oracle_separates_share": float(np.mean([len(set(qo[a:b])) > 1 for a, b in spans]))})

    ranking = json.loads(stages.run("ranking", "ranking.json", rank).read_text())
    return {"seed": seed, "rows": rows, "ranking": ranking}


CLAIMS = (("BoN-{n}(pi0, Q_oracle)", "pi0 (subset)"), ("BoN-{n}(pi0, Q1)", "pi0 (subset)"),
          ("BoN-{n}(pi0, Q_oracle)", "BoN-{n}(pi0, Q1)"), ("pi1 (Q1)", "pi0"),
          ("pi1 (Q1, distinct)", "pi0"), ("pi1 (Q_oracle, distinct)", "pi0"),
          ("pi1 (Q_oracle, distinct)", "pi1 (Q1, distinct)"), ("pi1 (Q1, kl-distill)", "pi0"),
          ("pi1 (Q_oracle, kl-distill)", "pi0"), ("pi1 (Q_oracle, kl-distill)", "pi1 (Q1, kl-distill)"),
          ("pi1 (Q1, kl-distill)", "pi1 (Q1)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, type=Path, help="finished loop run folders (one per seed)")
    ap.add_argument("--eval-tasks", type=int, default=72, help="eval tasks for the test-time rows (a prefix)")
    args = ap.parse_args()
    results = [one_run(run, args.eval_tasks) for run in args.runs]
    n = load_config(args.runs[0] / "config.yaml").eval.best_of_n[0]
    per_seed = {r["seed"]: [{"policy": name, "iteration": 0, "best_of_n": 1, **row} for name, row in r["rows"].items()]
                for r in results}
    rows = pooled_rows(per_seed)
    comps = []
    for a, b in CLAIMS:
        a, b = a.format(n=n), b.format(n=n)
        side = lambda name: {r["seed"]: r["rows"][name]["per_task"] for r in results}  # noqa: E731
        comps.append({"a": a, "b": b, **paired_difference(side(a), side(b))})
    lines = [f"Runs {', '.join(map(str, args.runs))}; test-time rows on the first {args.eval_tasks} eval tasks of "
             "each seed, update rows on all of them.", "",
             "| row | success % | 95% CI | episodes | per seed % |", "|---|---|---|---|---|"]
    lines += [f"| {r['policy']} | {rate_cells(r)} | {', '.join(f'{100 * v:.0f}' for v in r['per_seed'].values())} |"
              for r in rows]
    lines += ["", comparisons_table(comps), "", "Q1 vs Q_oracle on π0's top-4 commands at held-out states:", "",
              "| seed | states | pairs the oracle orders | Q1 pairwise accuracy | mean per-state Spearman | states where "
              "the oracle separates the top 4 |", "|---|---|---|---|---|---|"]
    for r in results:
        k = r["ranking"]
        fmt = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(f"| {r['seed']} | {k['states']} | {k['pairs']} | {fmt(k['pairwise_accuracy'])} | "
                     f"{fmt(k['mean_state_spearman'])} | {100 * k['oracle_separates_share']:.0f}% |")
    text = "\n".join(lines) + "\n"
    out = args.runs[0].parent
    write_text(out / "oracle_bounds.md", text)
    write_json(out / "oracle_bounds.json", {"rows": rows, "comparisons": comps,
                                            "ranking": {r["seed"]: r["ranking"] for r in results},
                                            "provenance": provenance(None, None)})
    print(text)


if __name__ == "__main__":
    main()
