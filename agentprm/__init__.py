"""agentprm: process reward models for multi-turn LLM agents (AgentPRM, arXiv 2502.10325, and neighbours).

The public Python API, one name per step of the loop (docs/python-api.md walks through it); each loads on first use,
so `import agentprm` stays light:

    tasks     generate_tasks, load_tasks, TaskSpec, register_env, env_factory
    policy    LMAgent, Decoding, save_policy, DEFAULT_POLICY (the bundled π0)
    stage 1   play_tasks, read_trajectories, iter_episodes, targets_from_rollouts, write_with_info
    stage 2   train_prm, TrainConfig, load_prm, ProcessRewardModel
    stage 3   run_update, UpdateContext, PolicyUpdateConfig, rollout_states
    test time BestOfNAgent, play_beam, UniformCritic
    eval      play_eval, EvalPlay, paired_difference
    the loop  LoopConfig, load_config, Loop
    view      view_run (a run folder as one HTML page)
    serving   PRMReward (the PRM as a TRL reward function)
"""
from agentprm.lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __all__ = lazy_exports(__name__, {
    "generate_tasks": "agentprm.envs.alfworld.generate", "load_tasks": "agentprm.envs.alfworld.tasks",
    "TaskSpec": "agentprm.envs.base", "register_env": "agentprm.envs.registry", "env_factory": "agentprm.envs.registry",
    "LMAgent": "agentprm.agent.lm", "Decoding": "agentprm.agent.decoding", "save_policy": "agentprm.agent.checkpoint",
    "DEFAULT_POLICY": "agentprm.loop.run",
    "play_tasks": "agentprm.rollout.play", "read_trajectories": "agentprm.data.trajectories",
    "iter_episodes": "agentprm.data.trajectories", "targets_from_rollouts": "agentprm.targets.mc",
    "write_with_info": "agentprm.data.tables",
    "train_prm": "agentprm.prm.train", "TrainConfig": "agentprm.train.config", "load_prm": "agentprm.prm.loading",
    "ProcessRewardModel": "agentprm.prm.model",
    "run_update": "agentprm.policy.update", "UpdateContext": "agentprm.policy.update",
    "PolicyUpdateConfig": "agentprm.policy.config", "rollout_states": "agentprm.policy.online_dpo",
    "BestOfNAgent": "agentprm.search", "play_beam": "agentprm.search", "UniformCritic": "agentprm.search",
    "play_eval": "agentprm.eval.play", "EvalPlay": "agentprm.eval.play", "paired_difference": "agentprm.eval.paired",
    "LoopConfig": "agentprm.loop.config", "load_config": "agentprm.loop.config", "Loop": "agentprm.loop.run",
    "view_run": "agentprm.view.page", "PRMReward": "agentprm.prm.serve",
})
__all__ = ["__version__", *__all__]
