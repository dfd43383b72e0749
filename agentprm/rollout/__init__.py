"""Stage 1a — rollouts: run an agent on many tasks at once and record every turn (`engine.run_episodes`)."""
