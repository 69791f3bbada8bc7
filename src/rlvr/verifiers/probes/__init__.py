"""The adversarial probe suite: known reward hacks run against the verifiers before a run."""
