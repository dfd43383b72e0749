"""InversePRM (arXiv 2502.10325 §4), one iteration — no outcome reward is used:
rollouts of π_{i-1} → InversePRM Q_i from expert demos (D⁺) vs those rollouts (D⁻) → online DPO π_i vs π_{i-1} →
eval π_i and BoN(π_i, Q_i). With `exploration.reset_frac` > 0 that share of the rollouts starts on the demos
(Reset-50-50, agentprm/rollout/reset.py). Iteration 0 is π0; with `policy0.retrain: true` it is SFT on the same
demos (the paper's baseline), which this algorithm then reuses as D⁺."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

from agentprm.errors import UserError
from agentprm.loop.algos import register_algorithm


def demos_path(loop, train_tasks) -> Path:
    """`inverse_prm.demos` if set; else the run's demos.parquet: the file π0's SFT trained on when it exists,
    otherwise the expert played once per train task, exactly as that SFT plays it."""
    c = loop.cfg
    if c.inverse_prm.demos:
        return Path(c.inverse_prm.demos)
    sft_demos = loop.run_dir / "demos.parquet"
    if c.policy0.retrain and sft_demos.exists():
        return sft_demos

    def build(out: Path) -> None:
        from agentprm.agent.policies import ExpertAgent
        from agentprm.data.trajectories import write_episodes_file
        from agentprm.eval.run import play_tasks

        episodes, _ = play_tasks(ExpertAgent(), train_tasks, per_task=1, seed=c.seed, max_steps=200, tag="expert",
                                 workers=c.rollout.workers, progress=loop.progress)
        write_episodes_file(out, episodes)

    return loop.stages.run("demos", "demos.parquet", build)


@register_algorithm("inverse-prm")
def iteration(loop, i: int, prev: Path, train_tasks, eval_tasks) -> Path:
    from agentprm.agent.lm import LMAgent
    from agentprm.prm.inverse import read_episodes, train_inverse_prm
    from agentprm.rollout.reset import reset_rollouts
    from agentprm.train.core import TrainConfig

    c, seed, it = loop.cfg, loop.cfg.seed + i, f"iter_{i}"
    demos = demos_path(loop, train_tasks)
    if c.exploration.reset_frac > 0:
        rollouts = reset_rollouts(loop, i, prev, train_tasks, read_episodes(demos))
    else:
        rollouts = loop.rollouts(i, prev, train_tasks)
    ic = c.inverse_prm
    init = prev if c.prm.init == "policy" else c.prm.init
    prm_cfg = TrainConfig(lr=ic.lr, epochs=ic.epochs, batch_size=ic.batch_size, seed=seed)

    def fit(out: Path) -> None:
        policy = LMAgent.load(prev, mode=c.rollout.mode, temperature=c.rollout.temperature, seed=seed,
                              name=f"pi{i - 1}")
        train_inverse_prm(demos, rollouts, policy, init, out, prm_cfg, ic.gamma, progress=loop.progress)

    prm = loop.stages.run(f"{it}/prm", f"{it}/prm", fit)
    if c.exploration.steer_frac > 0:
        update = lambda out: update_policy_steered(loop, i, prev, prm, rollouts, out)  # noqa: E731
    else:
        update = lambda out: loop.update_policy(i, prev, prm, rollouts, out)  # noqa: E731
    policy = loop.stages.run(f"{it}/policy", f"{it}/policy", update)
    loop.evaluate_iteration(i, policy, prm, eval_tasks)
    return policy


class SteeredSampler:
    """`sample` like an `LMAgent`'s, but each state is prompted with `format.steered_messages` with probability
    `frac` (drawn from `random.Random(seed)`); `steered` counts the states that were."""

    def __init__(self, agent, frac: float, seed: int):
        if not 0.0 <= frac <= 1.0:
            raise UserError(f"exploration.steer_frac {frac}: must be in [0, 1]")
        self.agent, self.frac, self._rng, self.steered = agent, frac, random.Random(seed), 0
        self.tokenizer, self.prompt_cfg, self.name = agent.tokenizer, agent.prompt_cfg, agent.name  # what DPO reads

    def sample(self, states: Sequence, turns: Sequence, n: int) -> list[list[str]]:
        steer = [self._rng.random() < self.frac for _ in states]
        self.steered += sum(steer)
        out: list[list[str]] = [[] for _ in states]
        plain = [k for k, s in enumerate(steer) if not s]
        for k, replies in zip(plain, self.agent.sample([states[k] for k in plain], [None] * len(plain), n)):
            out[k] = replies
        steered = [k for k, s in enumerate(steer) if s]
        for k, replies in zip(steered, self._sample_steered([states[k] for k in steered], n)):
            out[k] = replies
        return out

    def _sample_steered(self, states: Sequence, n: int) -> list[list[str]]:
        """`LMAgent.sample` with the steered prompt (LMAgent builds its prompts itself, so this mirrors it)."""
        import torch

        from agentprm.agent.format import format_reply, steered_messages

        a = self.agent
        if not states:
            return []
        prompts = [list(a.tokenizer.apply_chat_template(
            steered_messages(s, history_turns=a.prompt_cfg.history_turns), add_generation_prompt=True,
            tokenize=True, return_dict=True)["input_ids"]) for s in states]
        seed = self._rng.getrandbits(63)
        if a.mode == "generate":
            out = a.backend.generate(prompts, n, a.temperature, a.max_new_tokens, seed)
            return [[a.tokenizer.decode(ids, skip_special_tokens=True) for ids in row] for row in out]
        commands = [list(s.admissible) for s in states]
        scores = a.backend.score(prompts, [[a._ids(format_reply(c)) for c in cmds] for cmds in commands])
        gen = torch.Generator().manual_seed(seed)
        return [[cmds[j] for j in a._pick(logp, n, gen)] for cmds, logp in zip(commands, scores)]


def update_policy_steered(loop, i: int, prev: Path, prm_dir: Path, rollouts: Path, out: Path) -> None:
    """`Loop.update_policy` with `exploration.steer_frac` of the stage-3 generations steered. train_online_dpo builds
    its own sampler, so its body is inlined here around a `SteeredSampler`."""
    import copy

    from agentprm.agent.lm import LMAgent
    from agentprm.agent.replay import episode_states
    from agentprm.data.trajectories import iter_episodes, read_trajectories
    from agentprm.policy.online_dpo import OnlineDPOConfig, OnlineDPOLoss
    from agentprm.policy.sft import save_policy
    from agentprm.prm.model import ProcessRewardModel
    from agentprm.train.core import train

    c, seed = loop.cfg.policy, loop.cfg.seed + i
    states = {}
    for episode in iter_episodes(read_trajectories(rollouts)):
        for state, _ in episode_states(episode):
            states.setdefault(state.key(), state)
    policy = LMAgent.load(prev, mode=loop.cfg.rollout.mode, seed=seed, name=f"pi{i}")
    cfg = OnlineDPOConfig(beta=c.beta, samples_per_state=c.samples_per_state, temperature=c.temperature,
                          steps=c.steps, batch_size=c.batch_size, lr=c.lr, seed=seed)
    model = policy.backend.model
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    sampler = SteeredSampler(LMAgent(model, policy.tokenizer, policy.prompt_cfg, mode=policy.mode,
                                     temperature=cfg.temperature, seed=seed, name=policy.name),
                             loop.cfg.exploration.steer_frac, seed)
    history = train(model, list(states.values()), OnlineDPOLoss(sampler, reference, ProcessRewardModel.load(prm_dir),
                                                                cfg),
                    cfg.train_config(len(states)), description="online-dpo", progress=loop.progress)
    save_policy(model, policy.tokenizer, out, policy.prompt_cfg,
                online_dpo={"config": cfg.to_dict(), "history": history, "reference": str(prev),
                            "steer_frac": sampler.frac, "steered_states": sampler.steered})
