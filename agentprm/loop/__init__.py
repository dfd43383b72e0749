"""The AgentPRM loop: π0 → (rollout → Q-targets → PRM → policy update → eval) × iterations, resumable."""
