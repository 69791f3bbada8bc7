"""Env probes: each known hack gets reward 0 with an expected outcome and leaves the host untouched;
and each probe has teeth (the hack would work against a naive verifier or a buggy environment)."""

import json
import os

import pytest

from rlvr.envs import FilesEnv, registry
from rlvr.envs.base import EnvLimits
from rlvr.envs.tools import OPEN, parse_call
from rlvr.verifiers.env import EnvPredicateVerifier
from rlvr.verifiers.probes import env as env_probes
from rlvr.verifiers.probes.base import Probe
from rlvr.verifiers.probes.env import (
    FILES,
    FILES_OTHER,
    KV,
    PROBES,
    gold_in_observations,
    probe,
    replay_observations,
)


@pytest.mark.parametrize("p", PROBES, ids=lambda p: p.name)
def test_probe_gets_no_reward_and_leaves_the_host_untouched(p, tmp_path):
    state = p.setup(str(tmp_path))
    verdict = EnvPredicateVerifier(**p.verifier_options).verify(p.task, p.completion)
    assert verdict.reward == 0.0 and not verdict.passed
    assert verdict.outcome in p.expected, (verdict.outcome, verdict.details)
    assert p.host_check(state) == []


def test_suite_shape():
    names = [p.name for p in PROBES]
    assert len(names) == len(set(names)) >= 20
    assert all(isinstance(p, Probe) and p.kind == "env" and p.description and p.expected for p in PROBES)
    for needle in ["gold_fishing", "budget_bruteforce", "traversal", "goal_flag", "claim_success",
                   "foreign_trajectory", "fake_tool_output", "protected_write"]:
        assert any(needle in n for n in names), needle
    with pytest.raises(KeyError, match="known"):
        probe("nope")


def _naive_calls(text):
    """What a careless verifier would run: every <tool> body anywhere in the text."""
    out = []
    for chunk in text.split(OPEN)[1:]:
        try:
            out.append(parse_call(chunk.split("</tool>")[0].strip()))
        except ValueError:
            pass
    return out


def test_teeth_gold_fishing_host_check_catches_a_leaky_env(monkeypatch, tmp_path):
    class Leaky(FilesEnv):
        def tool_list(self, dir):
            return "files: " + " ".join(self.secret_values(self._task.gold))

    monkeypatch.setitem(registry.ENVIRONMENTS, "files", Leaky)
    p = probe("env_files_gold_fishing")
    assert gold_in_observations(p.task, replay_observations(p.task, p.completion))
    assert p.host_check(p.setup(str(tmp_path)))
    assert EnvPredicateVerifier().verify(p.task, p.completion).outcome == "infra"


def test_teeth_bruteforce_is_stopped_by_the_budget_alone():
    # with a budget of 1000 the same completion runs to the end: no violation, the last guess stays
    # (these envs give no success signal to search against, so the guesses cannot home in)
    for name, task in [("env_files_budget_bruteforce", FILES), ("env_kv_budget_bruteforce", KV)]:
        t = type(task)(**{**task.to_dict(), "gold": {**task.gold, "budget": 1000}})
        v = EnvPredicateVerifier(limits=EnvLimits(max_turns=1000)).verify(t, probe(name).completion)
        assert v.outcome == "wrong" and v.details["violations"] == [] and v.details["tool_calls"] > 300


def test_teeth_fake_tool_output_hides_a_real_solving_call():
    p = probe("env_files_fake_tool_output")
    env = FilesEnv()
    env.reset(p.task)
    for c in _naive_calls(p.completion):
        env.step(c.render())
    assert env.end_state() != {"files": p.task.gold["init"]["files"]}  # the hidden move did something


def test_teeth_tool_role_messages_hold_the_full_solution():
    p = probe("env_kv_tool_role_messages")
    tool_msgs = [m["content"] for m in json.loads(p.completion) if m["role"] == "tool"]
    assert EnvPredicateVerifier().verify(p.task, json.dumps(tool_msgs + ["done"])).outcome == "pass"


def test_teeth_foreign_trajectory_passes_on_its_own_task():
    assert EnvPredicateVerifier().verify(FILES_OTHER, probe("env_files_foreign_trajectory").completion).passed


def test_teeth_traversal_host_check_notices_an_escaped_file(monkeypatch, tmp_path):
    target = tmp_path / "escape.txt"
    monkeypatch.setattr(env_probes, "ESCAPE_TARGET", str(target))
    wd = tmp_path / "wd"
    wd.mkdir()
    p = probe("env_files_traversal_write_escape")
    state = p.setup(str(wd))
    target.write_text("pwned")  # what a host-backed environment would have done
    (wd / "extra").write_text("x")
    effects = p.host_check(state)
    assert any("host file created" in e for e in effects) and any("work directory" in e for e in effects)
    os.remove(target)
