"""Datasets the pipeline produces and reads: trajectory shards (`agentprm.data.trajectories`)."""
