"""Generation engines (HF in-process; vLLM optional) and collectors that turn tasks into trajectories."""
