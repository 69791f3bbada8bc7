"""One file per stage: sft, preference, reward_model, rl (GRPO family), ppo."""
