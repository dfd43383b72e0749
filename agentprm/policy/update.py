"""Stage 3: the policy update a loop config's `policy` section names, run against a critic (Q_i or the oracle), with
the metadata a saved π_i records. `PolicyUpdateConfig` is that section — the loop's YAML, `agentprm train-policy`'s
flags and both update methods read this one declaration (docs/algorithms.md §1, §6)."""
from __future__ import annotations

from typing import Sequence

from agentprm.agent.critic import Critic
from agentprm.policy.config import METHODS, PolicyUpdateConfig


# the key of a saved π_i's agentprm.json under which each update records itself (run_update's first return value)
UPDATE_KEYS = {method: method.replace("-", "_") for method in METHODS}
POLICY_GRADIENT_KEY = "policy_gradient"   # GRPO, SPRO, GiGPO, PRIME (loop/algos/grpo.py)


def saved_update(meta: dict) -> dict:
    """The stage-3 record in a saved policy's agentprm.json (config, history, hacking checks, ...), whichever update
    made it; {} for a policy no update made (π0). The one reader of those keys: the loop's plots and report."""
    return next((meta[k] for k in (*UPDATE_KEYS.values(), POLICY_GRADIENT_KEY) if k in meta), {})


def run_update(policy, critic: Critic, states: Sequence, p: PolicyUpdateConfig, seed: int, reference: str,
               progress: bool = True, on_log=None, steer_frac: float = 0.0, tasks: Sequence = (),
               max_steps: int = 30, workers: int = 2) -> tuple[str, dict]:
    """Update `policy` in place by `p.method` (with `p.lora`, its model is first wrapped with LoRA adapters: save it
    with `merge=p.lora.merge`); returns the metadata key (UPDATE_KEYS[p.method]) and {"config", "seed", "history",
    "reference", ...}. `on_log`/`steer_frac` apply to online DPO;
    `reference` names π_{i-1}'s folder (the update's frozen reference is a copy of `policy` taken at the start);
    beam-distill searches on `tasks` (`max_steps`, `workers`) and ignores `states`."""
    from agentprm.policy.kl_distill import train_kl_distill
    from agentprm.policy.online_dpo import train_online_dpo

    meta = {"config": p.to_dict(), "seed": seed, "reference": reference}
    if p.lora.r:   # adapters on π_{i-1}; they start at zero, so every update's frozen copy is π_{i-1} exactly
        from agentprm.models.lora import add_lora, trainable

        policy.backend.model = add_lora(policy.backend.model, p.lora, seed=seed)
        meta["lora"] = trainable(policy.backend.model)
    if p.method == "beam-distill":
        from agentprm.agent.lm import LMAgent
        from agentprm.policy.beam_distill import search_episodes, train_beam_distill

        # samples π_{i-1}: the search runs before the model is trained
        sampler = LMAgent(policy.backend, policy.tokenizer, policy.prompt_cfg, mode=policy.mode,
                          temperature=p.temperature, seed=seed, name=policy.name, distinct=p.distinct)
        episodes, _ = search_episodes(sampler, critic, tasks, p, max_steps=max_steps, seed=seed, workers=workers)
        history, distilled = train_beam_distill(policy, episodes, p, seed, progress=progress)
        return UPDATE_KEYS["beam-distill"], {**meta, "history": history, **distilled}
    if p.method == "kl-distill":
        return UPDATE_KEYS["kl-distill"], {**meta, "history": train_kl_distill(policy, critic, states, p, seed,
                                                                                progress=progress)}
    history, steered = train_online_dpo(policy, critic, states, p, seed, progress=progress, on_log=on_log,
                                        steer_frac=steer_frac)
    return UPDATE_KEYS["online-dpo"], {**meta, "history": history, "steer_frac": steer_frac, "steered_states": steered}
