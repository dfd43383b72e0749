"""Playing an eval: the one function behind every success rate the toolkit reports — a policy played greedily,
Best-of-N with a critic, or beam search with a critic, on a list of tasks — and the typed identity of a results row.
`agentprm eval`, the loop's eval stages (loop/run.py) and the sweep's search rows (loop/sweep.py) call it; success
rates and their Wilson CIs come from data/summary.py `summarize`, paired differences from eval/paired.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from agentprm.agent.critic import Critic
from agentprm.rollout.play import play_tasks
from agentprm.search import BestOfNAgent, play_beam


@dataclass(frozen=True)
class EvalPlay:
    """How eval episodes are played (the loop's `eval` section and its `rollout` section's envs)."""
    episodes_per_task: int = 1
    max_steps: int = 30
    seed: int = 0
    num_envs: int = 8
    workers: int | None = None     # env worker processes; beam search: episodes in flight (default: CPU count)
    progress: bool = True


def play_eval(agent, tasks: Sequence, how: EvalPlay, *, critic: Critic | None = None, best_of: int = 1,
              beam: tuple[int, int] | None = None, tag: str = "eval") -> tuple[list, dict]:
    """`agent` on every task `how.episodes_per_task` times: greedily (or as it samples), as Best-of-`best_of` ranked
    by `critic`, or beam search with `critic` and `beam` = (width, expand). Returns the episodes and their summary
    (success rate, Wilson CI, per task type and per task)."""
    if (best_of > 1 or beam) and critic is None:
        raise ValueError("Best-of-N and beam search need a critic")
    if beam:
        width, expand = beam
        return play_beam(tasks, agent, critic, width=width, expand=expand, max_steps=how.max_steps, seed=how.seed,
                         workers=how.workers or os.cpu_count() or 1, per_task=how.episodes_per_task)
    if best_of > 1:
        agent = BestOfNAgent(agent, critic, best_of)
    return play_tasks(agent, tasks, per_task=how.episodes_per_task, seed=how.seed, max_steps=how.max_steps, tag=tag,
                      num_envs=how.num_envs, workers=how.workers, progress=how.progress)


@dataclass(frozen=True)
class EvalRow:
    """Which row of a run's results an eval is — what the report, the paired comparisons (eval/paired.py) and the
    plots key on (data/summary.py RESULT_KEY), so no one parses it back out of a name."""
    policy: str                # "pi1"
    iteration: int
    best_of_n: int = 1         # samples per turn: Best-of-N's N, beam search's width × expand
    search: str = ""           # "" (greedy, or Best-of-N with Q_i), "beam2x2", or either with the uniform critic's
                               # suffix (eval/paired.py CONTROLS): "bon4-uniform", "beam2x2-logpi"

    @property
    def stage(self) -> str:
        """The eval's stage and file name in a run folder: pi1, pi1_bon4, pi1_beam2x2, pi1_bon4_uniform, ..."""
        if self.search:
            return f"{self.policy}_{self.search.replace('-', '_')}"
        return self.policy if self.best_of_n == 1 else f"{self.policy}_bon{self.best_of_n}"

    def record(self, summary: dict) -> dict:
        """The results row of this eval's summary."""
        return {"policy": self.policy, "iteration": self.iteration, "best_of_n": self.best_of_n,
                **({"search": self.search} if self.search else {}),
                "success_rate": summary["success_rate"], "ci95": summary["ci95"], "episodes": summary["episodes"],
                "by_type": summary["by_type"], **({"per_task": summary["per_task"]} if "per_task" in summary else {}),
                **({"mean_return": summary["mean_return"]} if "mean_return" in summary else {})}
