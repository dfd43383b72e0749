"""Stage 3 as the loop runs it, a plain function of its inputs: π_{i-1}'s rollout states, a critic (Q_i, or the
oracle critic with `policy.critic: oracle`), the update the `policy` section names (policy/update.py), and the
optional reward-hacking detector watching online DPO (`hacking.enabled`; its extra ensemble PRMs are resumable
stages of the run). Used by the algorithms that improve π against a critic (agentprm, inverse-prm, prime)."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentprm.agent.checkpoint import save_policy
from agentprm.errors import UserError
from agentprm.loop.stages import StageRunner, generated_train_split
from agentprm.policy.config import HackingConfig, PolicyUpdateConfig
from agentprm.policy.update import UpdateContext, run_update
from agentprm.prm.config import PrmConfig
from agentprm.search.critics import CriticContext, make_critic

if TYPE_CHECKING:   # loop/config.py imports the algorithms, which import this module
    from agentprm.loop.config import LoopConfig, RolloutConfig


@dataclass(frozen=True)
class PolicyStage:
    """What stage 3 reads of a run — its own sections and the few settings it shares — instead of the whole
    LoopConfig: the update (`policy`), how the oracle's, the search's and the probe's episodes are played
    (`rollout`), the hacking detector (`hacking`) and its extra PRMs, fitted like Q_i (`prm`)."""
    seed: int                       # the run's: iteration i's update is seeded seed + i; the search split's games
    policy: PolicyUpdateConfig
    rollout: RolloutConfig
    hacking: HackingConfig
    prm: PrmConfig
    gamma: float                    # the oracle's and the probe's discount (targets.gamma)
    steer_frac: float = 0.0         # exploration.steer_frac
    types: list[str] | None = None  # task types of the generated search split (tasks.types)
    env: str = "alfworld"           # whose generator makes that split (tasks.env)

    @classmethod
    def of(cls, cfg: LoopConfig) -> PolicyStage:
        return cls(cfg.seed, cfg.policy, cfg.rollout, cfg.hacking, cfg.prm, cfg.targets.gamma,
                   cfg.exploration.steer_frac, cfg.tasks.types, cfg.tasks.env)


def update_policy(cfg: PolicyStage, stages: StageRunner, i: int, prev: Path, prm_dir: Path, rollouts: Path,
                  train_tasks, out: Path, progress: bool = True) -> None:
    """π_i from π_{i-1} (`prev`) against the critic, on the distinct states of `rollouts`; saved to `out`.
    Online DPO (with `steer_frac` of the generations steered), kl-distill or beam-distill (searches the train
    tasks); seeded with seed + i."""
    from agentprm.agent.lm import LMAgent
    from agentprm.policy.online_dpo import rollout_states

    c, r, seed = cfg.policy, cfg.rollout, cfg.seed + i
    states = rollout_states(rollouts)
    policy = LMAgent.load(prev, mode=r.mode, seed=seed, name=f"pi{i}")
    prm = make_critic(c.critic, CriticContext(seed, prm=prm_dir, policy=prev, tasks=train_tasks, options=dict(
        mode=r.mode, gamma=cfg.gamma, max_steps=r.max_steps, num_envs=r.num_envs, workers=r.workers)))
    search_tasks = train_tasks
    if c.method == "beam-distill" and c.search_tasks:
        search_tasks = generated_train_split(stages, "search", cfg.env, c.search_tasks, cfg.seed, cfg.types,
                                             r.workers, progress)
    detector = None
    if cfg.hacking.enabled:   # online DPO only (config check)
        detector, states = hacking_detector(cfg, stages, i, prev, policy, prm, prm_dir, states, train_tasks,
                                            progress)
    result = run_update(policy, prm, states, c, UpdateContext(
        seed, str(prev), progress=progress, on_log=detector, steer_frac=cfg.steer_frac,
        tasks=search_tasks, max_steps=r.max_steps, workers=r.workers or 2))
    if detector:
        result.details["hacking"] = detector.summary()
    if c.critic == "oracle":
        result.details.update(oracle_episodes=prm.episodes, oracle_errors=prm.errors)   # the bound's price
        prm.close()
    save_policy(policy.backend.model, policy.tokenizer, out, policy.prompt_cfg, merge=c.lora.merge, **result.meta())


def hacking_detector(cfg: PolicyStage, stages: StageRunner, i: int, prev: Path, policy, prm, prm_dir: Path,
                     states: list, train_tasks, progress: bool = True) -> tuple:
    """The detector for iteration i and the states left for the update: a seeded `hacking.monitor_states` of
    them are held out to monitor. The extra ensemble PRMs are resumable stages (iter_<i>/prm_ensemble/<k>),
    fitted like Q_i to Q_i's targets with other seeds, which also changes their held-out task split."""
    from agentprm.policy.hacking import HackingDetector, episode_probe, hold_out
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.prm.train import train_prm

    h, seed = cfg.hacking, cfg.seed + i
    if len(states) < 2:
        raise UserError(f"hacking: {len(states)} rollout state(s); need at least 2 to hold some out to monitor")
    monitor, train_states = hold_out(states, min(h.monitor_states, len(states) // 2), seed)
    meta = prm_dir / "agentprm.json"
    targets = json.loads(meta.read_text()).get("targets") if meta.exists() else None
    if h.ensemble_size > 1 and not targets:
        raise UserError(f"hacking.ensemble_size {h.ensemble_size}: {prm_dir} was not fitted to MC targets "
                        "(algo agentprm), so there is nothing to refit; set hacking.ensemble_size: 1")
    p = cfg.prm
    init = prev if p.init == "policy" else p.init
    ensemble = []
    for k in range(1, h.ensemble_size):
        member_cfg = p.train_config(seed + 1000 * k)
        member = stages.run(f"iter_{i}/prm_ensemble_{k}", f"iter_{i}/prm_ensemble/{k}",
                            lambda o, m=member_cfg: train_prm(targets, init, p.loss, o, m, progress=progress,
                                                              **p.options()))
        ensemble.append(ProcessRewardModel.load(member))
    probe = None
    if h.probe_episodes > 0:
        tasks = random.Random(seed).sample(list(train_tasks), min(h.probe_episodes, len(train_tasks)))
        probe = episode_probe(tasks, per_task=1, seed=seed + 2000, max_steps=cfg.rollout.max_steps,
                              gamma=cfg.gamma, num_envs=cfg.rollout.num_envs, workers=cfg.rollout.workers)
    return HackingDetector(policy, prm, ensemble, monitor, h, probe, seed=seed,
                           temperature=cfg.policy.temperature), train_states
