"""The Python API (same outputs as the CLI), custom Python rewards in the verifier pool, held-out overlap
refusal, LoRA adapters beside the merged weights and as a starting point."""

import json
import sys
import textwrap

import pytest
import torch

import rlvr
from rlvr.data.arithmetic import generate
from rlvr.errors import ConfigError

BASE = """\
name: api
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{type: jsonl, path: {held}}}, max_new_tokens: 8}}
stages:
  - {{type: sft, max_steps: 2, batch_size: 4, micro_batch_size: 4, save_every: 0, data: {{type: jsonl, path: {train}}}}}
"""


def write_tasks(path, tasks):
    path.write_text("".join(json.dumps({"prompt": t.prompt, "completion": t.solution, "answer": t.gold["answer"]})
                            + "\n" for t in tasks))
    return path


@pytest.fixture
def recipe(tmp_path, tiny_dir, monkeypatch):
    monkeypatch.delitem(sys.modules, "my_rewards", raising=False)  # each test writes its own my_rewards.py
    train = write_tasks(tmp_path / "train.jsonl", generate(["add2"], 8, seed=1))
    held = write_tasks(tmp_path / "held.jsonl", generate(["add2"], 5, split="heldout", seed=1))
    p = tmp_path / "api.yaml"
    p.write_text(BASE.format(run_dir=tmp_path / "run", model=tiny_dir, held=held, train=train))
    return p


def test_api_run_eval_generate_verify_match_the_cli_outputs(recipe, tmp_path):
    summary = rlvr.run(str(recipe), stages__sft__max_steps=3)
    run = tmp_path / "run"
    saved = json.loads((run / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == [s["stage"] for s in saved["stages"]] == ["sft"]
    assert summary["report"] == str(run / "report.html") and (run / "report.html").exists()
    assert "max_steps: 3" in (run / "config.yaml").read_text()
    final = summary["stages"][0]["checkpoint"]
    res = rlvr.eval(final, str(tmp_path / "held.jsonl"), max_new_tokens=8, out=str(tmp_path / "e.json"))
    assert res["pass_at_1"] == saved["stages"][0]["pass_at_1"]  # same numbers as the pipeline's eval.json
    assert len(res["samples"]) == 5
    rows = rlvr.generate(final, str(tmp_path / "held.jsonl"), str(tmp_path / "c.jsonl"), max_new_tokens=8)
    v = rlvr.verify(str(tmp_path / "held.jsonl"), str(tmp_path / "c.jsonl"), str(tmp_path / "v.jsonl"), workers=0)
    assert v["n"] == len(rows) == 5 and v["pass_rate"] == res["pass_at_1"]  # greedy both times


def test_eval_tasks_that_overlap_training_are_refused_by_content(recipe, tmp_path):
    with pytest.raises(ConfigError, match=r"5 evaluation prompt\(s\) also occur in the training tasks of stages.0.data"):
        rlvr.run(str(recipe), set=[f"stages.sft.data.path={tmp_path / 'held.jsonl'}"])
    assert not (tmp_path / "run").exists()
    summary = rlvr.run(str(recipe), set=[f"stages.sft.data.path={tmp_path / 'held.jsonl'}", "eval.overlap=warn"])
    assert summary["stages"][0]["stage"] == "sft"


REWARDS = '''
import time

def score(task, completion):
    return 0.5 + float(task.gold["answer"] in completion)

def model_text(completion):  # validate calls a reward on a demonstration and a plain sentence; the tiny
    return "boxed" not in completion and "answer" not in completion  # model's 6 tokens are neither

def boom(task, completion):
    if model_text(completion):
        raise RuntimeError("my reward is broken")
    return 1.0

def slow(task, completion):
    if model_text(completion):
        time.sleep(30)
    return 1.0
'''


def grpo_stage(tmp_path, fn, workers, infra_frac=1.0):
    return (f"stages=[{{type: grpo, max_steps: 1, tasks_per_step: 2, save_every: 0, verifier_workers: {workers}, "
            f"max_infra_frac: {infra_frac}, "
            f"sampling: {{group_size: 2, max_new_tokens: 6}}, data: {{type: jsonl, path: {tmp_path / 'train.jsonl'}}}, "
            f"rewards: [{{name: python, function: 'my_rewards:{fn}', weight: 1.0, timeout_s: 0.5}}]}}]")


@pytest.mark.parametrize("fn, workers", [("score", 1), ("boom", 0), ("slow", 0)])
def test_python_reward_runs_in_the_verifier_pool_and_failures_are_infra(recipe, tmp_path, monkeypatch, fn, workers):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.chdir(tmp_path)
    # max_infra_frac 1.0: this test is about infra kept out of the advantages; the pause above the threshold
    # (default 0.5) has its own tests (below and tests/unit/trainers/test_faults.py)
    rlvr.run(str(recipe), set=[grpo_stage(tmp_path, fn, workers)])
    (rec,) = [json.loads(x) for x in (tmp_path / "run" / "grpo" / "metrics.jsonl").read_text().splitlines()
              if "rollout/pass_rate" in x]
    if fn == "score":  # 0.5 + hit: every reward is 0.5 or 1.5, and the term is logged under its name
        assert rec["reward/score"] >= 0.5 and rec.get("verifier/infra", 0) == 0
        assert not (tmp_path / "run" / "grpo" / "reward_errors.jsonl").exists()
    else:  # raised or ran past timeout_s: infra, kept out of the advantages (nothing trained on)
        assert rec["verifier/infra"] == 4 and rec["train/sequences"] == 0
        errs = [json.loads(x) for x in (tmp_path / "run" / "grpo" / "reward_errors.jsonl").read_text().splitlines()]
        assert len(errs) == 4 and all(e["step"] == 1 and e["completion_ids"] for e in errs)
        says = "RuntimeError: my reward is broken" if fn == "boom" else "timeout: ran past its timeout_s of 0.5s"
        assert says in errs[0]["error"]


def test_a_failing_reward_pauses_the_run_naming_its_error_file_and_reproduction(recipe, tmp_path, monkeypatch):
    from rlvr.trainers.guards import VerifierStormError

    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VerifierStormError) as e:
        rlvr.run(str(recipe), set=[grpo_stage(tmp_path, "boom", 0, infra_frac=0.5)])
    msg, errors = str(e.value), tmp_path / "run" / "grpo" / "reward_errors.jsonl"
    assert "4 of 4 verifications were infra" in msg
    assert "RuntimeError: my reward is broken at my_rewards.py:12 in boom" in msg  # type, message, location
    assert f"are in {errors}" in msg and "samples.jsonl" not in msg
    cmd = f"rlvr verify --tasks {tmp_path / 'train.jsonl'} --completions {errors} --reward my_rewards:boom"
    assert cmd in msg
    first = json.loads(errors.read_text().splitlines()[0])
    assert 'raise RuntimeError("my reward is broken")' in first["traceback"] and first["where"] == "my_rewards.py:12 in boom"
    # the command the message gives reproduces the verdicts: every recorded completion is infra again (exit 3)
    summary = rlvr.verify(str(tmp_path / "train.jsonl"), str(errors), str(tmp_path / "v.jsonl"), workers=0,
                          rewards=["my_rewards:boom"])
    assert summary["counts"] == {"infra": 4}


def test_broken_rewards_are_validate_problems_before_anything_trains(recipe, tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def r(task, completion):\n    return task.answer\n")
    monkeypatch.chdir(tmp_path)
    sft = f"{{type: sft, max_steps: 2, data: {{type: jsonl, path: {tmp_path / 'train.jsonl'}}}}}"
    grpo = f"{{type: grpo, data: {{type: jsonl, path: {tmp_path / 'train.jsonl'}}}, " \
           "rewards: [{name: python, function: 'my_rewards:r'}]}"
    with pytest.raises(ConfigError, match=r"stages.1.rewards.0.function: stage grpo, reward 'r'.*no attribute 'answer'"
                                          r".*did you mean task.gold\['answer'\]"):
        rlvr.run(str(recipe), set=[f"stages=[{sft}, {grpo}]"])
    assert not (tmp_path / "run" / "sft").exists()  # nothing trained first


def test_unimportable_reward_function_is_a_validate_problem(recipe, tmp_path):
    grpo = "stages=[{type: grpo, rewards: [{name: python, function: 'no_such_module:score'}]}]"
    with pytest.raises(ConfigError, match=r"stages.0.rewards.0.function.*no_such_module"):
        rlvr.run(str(recipe), set=[grpo])


def test_lora_adapter_saved_beside_merged_weights_and_usable_as_a_start(recipe, tmp_path):
    from transformers import AutoModelForCausalLM

    rlvr.run(str(recipe), set=["model.lora.r=4", "model.lora.target_modules=[q_proj, v_proj]",
                               "stages.sft.optim.lr=0.01"])
    final = tmp_path / "run" / "sft" / "final"
    assert (final / "adapter" / "adapter_config.json").exists()
    assert (final / "adapter" / "adapter_model.safetensors").exists()
    merged = AutoModelForCausalLM.from_pretrained(final)
    assert not any("lora" in k for k in merged.state_dict())
    from rlvr.models.load import load_pretrained

    from_adapter, _ = load_pretrained(final / "adapter")
    a, b = merged.state_dict(), from_adapter.state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    r1 = rlvr.eval(str(final), str(tmp_path / "held.jsonl"), max_new_tokens=8)
    r2 = rlvr.eval(str(final / "adapter"), str(tmp_path / "held.jsonl"), max_new_tokens=8)
    assert [s["completion"] for s in r1["samples"]] == [s["completion"] for s in r2["samples"]]
    s = rlvr.run(str(recipe), set=[f"model.path={final / 'adapter'}", f"run_dir={tmp_path / 'run2'}"])
    assert s["stages"][0]["stage"] == "sft"
