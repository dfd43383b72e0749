"""Stage 3 dispatch: the policy update a loop config's `policy` section names, run against a critic (Q_i or the
oracle), with the metadata a saved π_i records. One place builds each method's config from the section, so the loop
and the study scripts (scripts/oracle_bounds.py) update π identically."""
from __future__ import annotations

from typing import Sequence

from agentprm.policy.kl_distill import KLDistillConfig, train_kl_distill
from agentprm.policy.online_dpo import OnlineDPOConfig, train_online_dpo


def run_update(policy, critic, states: Sequence, p, seed: int, reference: str, progress: bool = True, on_log=None,
               steer_frac: float = 0.0) -> tuple[str, dict]:
    """Update `policy` in place by `p.method` (`p`: the loop's PolicyUpdateConfig); returns the metadata key
    ("online_dpo" | "kl_distill") and {"config", "history", "reference", ...}. `on_log`/`steer_frac` apply to online
    DPO; `reference` names π_{i-1}'s folder (the update's frozen reference is a copy of `policy` taken at the start)."""
    if p.method == "kl-distill":
        cfg = KLDistillConfig(beta=p.beta, candidates=p.candidates, steps=p.steps, batch_size=p.batch_size, lr=p.lr,
                              seed=seed)
        history = train_kl_distill(policy, critic, states, cfg, progress=progress)
        return "kl_distill", {"config": cfg.to_dict(), "history": history, "reference": reference}
    cfg = OnlineDPOConfig(beta=p.beta, samples_per_state=p.samples_per_state, temperature=p.temperature,
                          min_margin=p.min_margin, distinct=p.distinct, steps=p.steps, batch_size=p.batch_size,
                          lr=p.lr, seed=seed)
    history, steered = train_online_dpo(policy, critic, states, cfg, progress=progress, on_log=on_log,
                                        steer_frac=steer_frac)
    return "online_dpo", {"config": cfg.to_dict(), "history": history, "reference": reference,
                          "steer_frac": steer_frac, "steered_states": steered}
