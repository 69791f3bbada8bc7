"""<stage>/samples.jsonl: sample completions with their rewards, from a stage's first step on."""

import json
from types import SimpleNamespace

import torch

from rlvr.config.logging import LoggingConfig
from rlvr.monitoring.sinks import log_samples, stage_logging


def rollout(groups=2, size=2):
    task = lambda i: SimpleNamespace(id=f"t{i}", policy_messages=lambda: [{"role": "user", "content": f"q{i}"}])
    return SimpleNamespace(num_groups=groups, group_size=size, tasks=[task(i) for i in range(groups)],
                           texts=[f"c{i}" for i in range(groups * size)], rewards=torch.ones(groups, size),
                           outcomes=["pass"] * groups * size, finish_reason=["stop"] * groups * size)


def steps_written(tmp_path, cfg, steps):
    with stage_logging(cfg, tmp_path, "grpo"):
        for step in steps:
            log_samples(step, rollout())
    path = tmp_path / "samples.jsonl"
    return [json.loads(x)["step"] for x in path.read_text().splitlines()] if path.exists() else []


def test_a_stage_shorter_than_samples_every_still_writes_its_first_step(tmp_path):
    assert steps_written(tmp_path, LoggingConfig(samples_every=10, samples=2), range(1, 7)) == [1, 1]


def test_samples_every_n_steps_after_the_first(tmp_path):
    assert steps_written(tmp_path, LoggingConfig(samples_every=10, samples=1), range(1, 26)) == [1, 10, 20]


def test_samples_every_zero_writes_nothing(tmp_path):
    assert steps_written(tmp_path, LoggingConfig(samples_every=0), range(1, 12)) == []
