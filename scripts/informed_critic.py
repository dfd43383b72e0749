"""The critic the learning curve picked, with and without the layout prior, at test time and in one policy update
(the targets at the curve's regime).

    python scripts/informed_critic.py --curve runs/curve --out runs/informed --seeds 0 1 2

The curve (scripts/critic_curve.py, run first with `--tasks 240 --variants cont-plackett-luce-prior-adm` for every
seed here) trained its best critic per seed: listwise (Plackett-Luce) on continuation labels of π0's top 4 at 5
states of each of 240 train games, π0's log π as its prior, the admissible commands in its prompt. Its held-out
pairs said what binds: half of them are two searches, ordered by the hidden layout. Here, per seed:

- **The layout prior** (agentprm/search/layout.py) counted from the same 240 train games' PDDL; its weight w in
  `logit Q + w·f` chosen on the curve's held-out states (eval games of floor plans the train split never has),
  from a fixed grid, for Q and for π0's own log π alike; the pairwise accuracy with w chosen on the other half of
  those states (2-fold over states) is reported beside it.
- **Test time** on `--eval-tasks` *other* eval games (generated with seed 1; none is a held-out game): greedy π0,
  and Best-of-4 samples of π0 (T 0.7) ranked by: a uniform critic (the control), Q, Q + layout, and π0's own log π
  + layout (the critic-free reference with the same prior); and the same four critics choosing among π0's four
  likeliest commands at every turn (`top-4`: the candidates the held-out pairs are made of; ties go to π0's first).
- **One update**: π1 = online DPO from π0 (the loop's defaults: 60 steps, β 0.03, the paper's sampling) on the
  states of the curve's 240-game rollouts, against Q and against Q + layout; and, critic-free from the same 1,440
  rollouts (6 a game: the groups), GRPO and GiGPO (the loop's `policy_gradient` defaults). Each π1 is played greedily
  on the same games. (Q's continuation labels cost 4,800 greedy continuations of π0 beyond the rollouts.)

Every row is paired over the same games and seeds (eval/paired.py). Resumable (StageRunner under --out). Results:
<out>/informed.md and informed.json.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

from agentprm.agent.lm import LMAgent
from agentprm.data.summary import pooled_rows, rate_cells
from agentprm.envs.alfworld.generate import generate_tasks
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.eval.paired import comparisons_table, paired_difference
from agentprm.eval.play import EvalPlay, play_eval
from agentprm.io import provenance, write_json, write_text
from agentprm.loop.config import EvalConfig
from agentprm.loop.run import DEFAULT_POLICY
from agentprm.loop.stages import StageRunner, run_lock
from agentprm.prm.loading import load_prm
from agentprm.prm.metrics import pairwise_accuracy
from agentprm.search import UniformCritic
from agentprm.search.layout import LayoutCritic, LayoutPrior
from agentprm.search.policy import PolicyCritic   # π0's own log π: what the layout prior adds without Q

sys.path.insert(0, str(Path(__file__).parent))
from critic_curve import load_heldout  # noqa: E402  (the study's sibling script)

VARIANT = "cont-plackett-luce-prior-adm"     # the curve's best critic (docs/studies/critic-curve.md)
TRAIN = "train-240"
WEIGHTS = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 15.0, 30.0, 60.0, 120.0)   # the grid w is chosen from
EVAL_SEED = 1                                # the held-out states' games are eval games of seed 0


def policy_gradient(rollouts: Path, out: Path, algo: str, seed: int) -> None:
    """π1 by GRPO or GiGPO from π0 on `rollouts` (the loop's `policy_gradient` defaults, as `agentprm loop --algo`
    runs them: loop/algos/grpo.py)."""
    from agentprm.agent.checkpoint import save_policy
    from agentprm.agent.encoding import PromptConfig
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.models import load_causal_lm, load_tokenizer
    from agentprm.policy.config import PolicyGradientConfig
    from agentprm.policy.policy_gradient import train_policy_gradient
    from agentprm.policy.update import POLICY_GRADIENT, UpdateResult

    cfg = PolicyGradientConfig()
    model, tokenizer, prompt = (load_causal_lm(DEFAULT_POLICY), load_tokenizer(DEFAULT_POLICY),
                                PromptConfig.load(DEFAULT_POLICY))
    history = train_policy_gradient(model, tokenizer, prompt, iter_episodes(read_trajectories(rollouts)), cfg, algo,
                                    seed, progress=False)
    result = UpdateResult(POLICY_GRADIENT, history, cfg.to_dict(), seed, str(DEFAULT_POLICY), {"advantages": algo})
    save_policy(model, tokenizer, out, prompt, **result.meta())


def choose_weight(base: np.ndarray, f: np.ndarray, truth: np.ndarray, keys: list[str]) -> dict:
    """w from WEIGHTS maximising held-out pairwise accuracy of base + w·f; and the 2-fold (over states) accuracy of
    a w chosen on one half, scored on the other — what the chosen w is worth on states it was not chosen on."""
    def acc(w, mask):
        idx = np.flatnonzero(mask)
        return pairwise_accuracy((base + w * f)[idx].tolist(), truth[idx].tolist(), [keys[i] for i in idx])

    everywhere = np.ones(len(keys), bool)
    grid = {w: acc(w, everywhere)[0] for w in WEIGHTS}
    fold = {k: random.Random(k).random() < 0.5 for k in sorted(set(keys))}
    half = np.array([fold[k] for k in keys])
    right = pairs = 0
    for side in (half, ~half):
        w = max(WEIGHTS, key=lambda w: acc(w, ~side)[0])
        a, n = acc(w, side)
        right, pairs = right + a * n, pairs + n
    best = max(WEIGHTS, key=grid.__getitem__)
    return {"weight": best, "accuracy": grid[best], "accuracy_at_0": grid[0.0], "cross_fitted": right / pairs,
            "grid": {str(w): a for w, a in grid.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--curve", type=Path, required=True, help="scripts/critic_curve.py's --out folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-tasks", type=int, default=216)
    ap.add_argument("--workers", type=int, default=None, help="env worker processes (default: CPU count)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with run_lock(args.out):
        stages = StageRunner(args.out, resume=True)
        held_states, held_actions, truth = load_heldout(args.curve / "heldout")
        keys = [s.key() for s in held_states]
        tasks = load_tasks(stages.run("tasks_eval", "tasks/eval", lambda out: generate_tasks(
            out, "eval", args.eval_tasks, EVAL_SEED, workers=args.workers or 2, progress=False)))
        held_games = {s.task_id for s in held_states}
        assert not held_games & {t.task_id for t in tasks}, "an eval game is one of the held-out states' games"
        prior_file = stages.run("layout", "layout.json", lambda path: LayoutPrior.from_tasks(
            load_tasks(args.curve / "tasks" / TRAIN)).save(path))
        prior = LayoutPrior.load(prior_file)
        f = np.array([prior.advantage(s, a) for s, a in zip(held_states, held_actions)])
        e = EvalConfig()

        def fitted(name: str, base) -> dict:
            def build(path: Path) -> None:
                logits = base.logits(held_states, held_actions).numpy()
                write_json(path, choose_weight(logits, f, truth, keys))
            return json.loads(stages.run(f"weight_{name}", f"weights/{name}.json", build).read_text())

        def play(name: str, seed: int, make_agent, critic=None, best_of: int = 1) -> dict:
            def build(path: Path) -> None:
                how = EvalPlay(e.episodes_per_task, e.max_steps, seed + 1000, workers=args.workers, progress=False)
                _, summary = play_eval(make_agent(), tasks, how, critic=critic() if critic else None,
                                       best_of=best_of, tag=f"eval-{name}")
                write_json(path, summary)
            return json.loads(stages.run(f"eval_{name}_s{seed}", f"evals/s{seed}/{name}.json", build).read_text())

        def top4():   # π0's four likeliest commands, every turn: the candidates the held-out pairs ranked
            return LMAgent.load(DEFAULT_POLICY, mode="choose", distinct=True, name="pi0-top4")

        def sampler(seed: int):
            return lambda: LMAgent.load(DEFAULT_POLICY, mode="choose", temperature=e.bon_temperature, seed=seed + 1,
                                        name="pi0")

        fits = {"pi0": fitted("pi0", PolicyCritic(DEFAULT_POLICY))}
        # greedy π0 is deterministic (choose mode, a deterministic engine): one play serves every seed's pairing
        greedy = play("pi0", 0, lambda: LMAgent.load(DEFAULT_POLICY, mode="choose", name="pi0"))
        pi0_informed = lambda: LayoutCritic(PolicyCritic(DEFAULT_POLICY), prior, fits["pi0"]["weight"])  # noqa: E731
        rows, comps = {}, []
        states = None
        for seed in args.seeds:
            point = args.curve / "points" / VARIANT / "n240" / f"s{seed}" / "prm"
            if not point.is_dir():
                raise SystemExit(f"{point}: no critic; run scripts/critic_curve.py --tasks 240 --seeds {seed} "
                                 f"--variants {VARIANT} first")
            fits[f"q_s{seed}"] = fit = fitted(f"q_s{seed}", load_prm(point))
            informed = lambda p=point, w=fit["weight"]: LayoutCritic(load_prm(p), prior, w)  # noqa: E731
            r = {"pi0": greedy,
                 "BoN-4(pi0, uniform)": play("bon4_uniform", seed, sampler(seed), lambda: UniformCritic(seed), 4),
                 "BoN-4(pi0, Q)": play("bon4_q", seed, sampler(seed), lambda p=point: load_prm(p), 4),
                 "BoN-4(pi0, Q + layout)": play("bon4_q_layout", seed, sampler(seed), informed, 4),
                 "BoN-4(pi0, log pi0 + layout)": play("bon4_pi0_layout", seed, sampler(seed), pi0_informed, 4),
                 "top-4(pi0, uniform)": play("top4_uniform", seed, top4, lambda: UniformCritic(seed), 4),
                 "top-4(pi0, Q)": play("top4_q", seed, top4, lambda p=point: load_prm(p), 4),
                 "top-4(pi0, Q + layout)": play("top4_q_layout", seed, top4, informed, 4),
                 "top-4(pi0, log pi0 + layout)": play("top4_pi0_layout", seed, top4, pi0_informed, 4)}
            for label, critic in (("pi1 (Q)", lambda p=point: load_prm(p)), ("pi1 (Q + layout)", informed)):
                stage = f"pi1_{'q_layout' if 'layout' in label else 'q'}_s{seed}"

                def update(out: Path, critic=critic, seed=seed) -> None:
                    nonlocal states
                    from agentprm.agent.checkpoint import save_policy
                    from agentprm.policy.config import PolicyUpdateConfig
                    from agentprm.policy.online_dpo import rollout_states
                    from agentprm.policy.update import UpdateContext, run_update

                    states = states or rollout_states(args.curve / "rollouts")
                    policy = LMAgent.load(DEFAULT_POLICY, mode="choose", seed=seed + 1, name="pi1")
                    result = run_update(policy, critic(), states, PolicyUpdateConfig(),
                                        UpdateContext(seed + 1, str(DEFAULT_POLICY), progress=False))
                    save_policy(policy.backend.model, policy.tokenizer, out, policy.prompt_cfg, **result.meta())

                folder = stages.run(stage, f"policies/{stage}", update)
                r[label] = play(stage.rsplit("_", 1)[0], seed, lambda d=folder, s=seed: LMAgent.load(
                    d, mode="choose", seed=s, name="pi1"))
            for algo in ("grpo", "gigpo"):     # critic-free, from the same 1,440 rollouts (groups of 6 per game)
                folder = stages.run(f"pi1_{algo}_s{seed}", f"policies/pi1_{algo}_s{seed}",
                                    lambda out, algo=algo, seed=seed: policy_gradient(args.curve / "rollouts", out,
                                                                                      algo, seed + 1))
                r[f"pi1 ({algo.upper() if algo == 'grpo' else 'GiGPO'})"] = play(f"pi1_{algo}", seed, lambda d=folder,
                                                                                s=seed: LMAgent.load(
                    d, mode="choose", seed=s, name="pi1"))
            rows[seed] = r
        side = lambda name: {s: rows[s][name]["per_task"] for s in rows}  # noqa: E731
        for a, b in (("BoN-4(pi0, uniform)", "pi0"), ("BoN-4(pi0, Q)", "pi0"), ("BoN-4(pi0, Q + layout)", "pi0"),
                     ("BoN-4(pi0, log pi0 + layout)", "pi0"), ("BoN-4(pi0, Q)", "BoN-4(pi0, uniform)"),
                     ("BoN-4(pi0, Q + layout)", "BoN-4(pi0, uniform)"), ("BoN-4(pi0, Q + layout)", "BoN-4(pi0, Q)"),
                     ("BoN-4(pi0, Q + layout)", "BoN-4(pi0, log pi0 + layout)"),
                     ("top-4(pi0, uniform)", "pi0"), ("top-4(pi0, Q)", "pi0"), ("top-4(pi0, Q + layout)", "pi0"),
                     ("top-4(pi0, log pi0 + layout)", "pi0"), ("top-4(pi0, Q + layout)", "top-4(pi0, Q)"),
                     ("top-4(pi0, Q + layout)", "top-4(pi0, log pi0 + layout)"), ("pi1 (Q)", "pi0"),
                     ("pi1 (Q + layout)", "pi0"), ("pi1 (Q + layout)", "pi1 (Q)"), ("pi1 (GRPO)", "pi0"),
                     ("pi1 (GiGPO)", "pi0"), ("pi1 (Q)", "pi1 (GiGPO)"), ("pi1 (Q)", "pi1 (GRPO)"),
                     ("pi1 (Q + layout)", "pi1 (GiGPO)")):
            comps.append({"a": a, "b": b, **paired_difference(side(a), side(b))})
        per_seed = {s: [{"policy": name, "iteration": 0, "best_of_n": 1, **row} for name, row in r.items()]
                    for s, r in rows.items()}
        lines = [f"Seeds {', '.join(map(str, rows))}; {len(tasks)} eval games (seed {EVAL_SEED}) per seed; critic "
                 f"{VARIANT} at 240 train games; layout prior of the same games ({prior.games}).", "",
                 "| row | success % | 95% CI | episodes | per seed % |", "|---|---|---|---|---|"]
        lines += [f"| {r['policy']} | {rate_cells(r)} | {', '.join(f'{100 * v:.1f}' for v in r['per_seed'].values())} |"
                  for r in pooled_rows(per_seed)]
        lines += ["", comparisons_table(comps), "", "The weight of the layout prior, chosen on the curve's held-out "
                  "states (pairwise accuracy against the oracle):", "",
                  "| base | w | accuracy at w (chosen here) | at w = 0 | w chosen on the other half of the states |",
                  "|---|---|---|---|---|"]
        lines += [f"| {name} | {fit['weight']:g} | {fit['accuracy']:.3f} | {fit['accuracy_at_0']:.3f} | "
                  f"{fit['cross_fitted']:.3f} |" for name, fit in fits.items()]
        text = "\n".join(lines) + "\n"
        write_text(args.out / "informed.md", text)
        write_json(args.out / "informed.json", {"rows": pooled_rows(per_seed), "comparisons": comps, "weights": fits,
                                                "provenance": provenance(None, None)})
        print(text)


if __name__ == "__main__":
    main()
