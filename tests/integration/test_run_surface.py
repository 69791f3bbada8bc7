"""`rlvr validate` as a dry run, `--resume` keeping the run's config, stage commands with --run-dir and a
report, readable files, no `.prev` for a run that fails before training, `rlvr verify` / `generate` / eval.json."""

import json
import os
import stat
import subprocess
import sys

import pytest

from rlvr.data.arithmetic import generate

RECIPE = """\
name: s
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 6, split: heldout}}, max_new_tokens: 8}}
stages:
  - {{type: sft, max_steps: 3, batch_size: 4, micro_batch_size: 4, save_every: 0,
     data: {{type: jsonl, path: {data}}}}}
"""


def cli(*args, cwd=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, env=env,
                          timeout=400, cwd=cwd)


def demos(path, n=8):
    path.write_text("".join(json.dumps({"prompt": t.prompt, "completion": t.solution}) + "\n"
                            for t in generate(["add2"], n, seed=1)))
    return path


def recipe(tmp_path, tiny_dir, name="r", data=None):
    p = tmp_path / f"{name}.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / name, model=tiny_dir, data=data or demos(tmp_path / "d.jsonl")))
    return p


BROKEN = """\
name: broken
run_dir: {run_dir}
model: {{path: {missing}/model}}
eval: {{tasks: {{type: jsonl, path: {missing}/eval.jsonl}}}}
stages:
  - type: sft
    batch_size: 10
    micro_batch_size: 64
    data: {{type: jsonl, path: {missing}/train.jsonl}}
  - type: dpo
    pairs: {{path: {missing}/pairs.jsonl}}
  - type: grpo
    sampling: {{group_size: 1}}
"""


def test_validate_is_a_dry_run_reporting_every_problem_with_key_and_line(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text(BROKEN.format(run_dir=tmp_path / "run", missing=tmp_path / "nope"))
    r = cli("validate", str(p))
    assert r.returncode == 2, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    for key, line in [("model.path", 3), ("eval.tasks.path", 4), ("stages.0.micro_batch_size", 8),
                      ("stages.0.data.path", 9), ("stages.1.pairs.path", 11), ("stages.2.sampling.group_size", 13)]:
        assert key in err and f"{p}:{line}" in err, (key, err)
    assert "Traceback" not in r.stderr
    run = cli("run", str(p))  # run refuses before any stage starts
    assert run.returncode == 2 and not (tmp_path / "run" / "sft").exists()


def test_resume_uses_the_saved_config_and_refuses_a_silent_change(tiny_dir, tmp_path):
    import rlvr
    from rlvr.errors import ConfigError

    p = recipe(tmp_path, tiny_dir)
    rlvr.run(str(p), set=["stages.sft.max_steps=2"])
    saved = (tmp_path / "r" / "config.yaml").read_text()
    with pytest.raises(ConfigError) as e:  # resumed without the --set: the schedule would change silently
        rlvr.run(str(p), resume=True)
    err = " ".join(str(e.value).split())
    assert "stages.0.max_steps: 2 -> 3" in err and "--allow-config-change" in err
    assert (tmp_path / "r" / "config.yaml").read_text() == saved
    summary = rlvr.run(resume=True, run_dir=str(tmp_path / "r"))  # no recipe: the saved one
    assert summary["stages"][0]["stage"] == "sft"
    rlvr.run(str(p), resume=True, allow_config_change=True)
    log = [json.loads(x) for x in (tmp_path / "r" / "config_changes.jsonl").read_text().splitlines()]
    assert log[-1]["changes"]["stages.0.max_steps"] == [2, 3]
    assert "max_steps: 3" in (tmp_path / "r" / "config.yaml").read_text()


def test_stage_command_takes_run_dir_writes_report_and_readable_files(tiny_dir, tmp_path):
    os.umask(0o022)
    p = recipe(tmp_path, tiny_dir)
    out = tmp_path / "elsewhere"
    r = cli("sft", str(p), "--run-dir", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "report.html").exists() and (out / "summary.json").exists() and not (tmp_path / "r").exists()
    for f in [out / "config.yaml", out / "summary.json", out / "sft" / "metrics.jsonl", out / "sft" / "eval.json",
              out / "sft" / "final" / "model.safetensors", out / "sft" / "final" / "config.json"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, (f, oct(f.stat().st_mode))
    for d in [out / "sft" / "final", out / "sft"]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, (d, oct(d.stat().st_mode))


def test_no_prev_archive_when_the_new_run_fails_before_training(tiny_dir, tmp_path):
    import rlvr
    from rlvr.errors import ConfigError

    p = recipe(tmp_path, tiny_dir)
    rlvr.run(str(p))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=?", "completion": "2"}\n{"prompt": \n')
    with pytest.raises(ConfigError, match=f"{bad}:2"):
        rlvr.run(str(p), set=[f"stages.sft.data.path={bad}"])
    assert not list((tmp_path / "r").glob("sft.prev-*")) and (tmp_path / "r" / "sft" / "final").exists()


def test_generate_then_verify_and_eval_keeps_every_completion(tiny_dir, tmp_path):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("".join(json.dumps({"id": t.id, "prompt": t.prompt, "answer": t.gold["answer"]}) + "\n"
                             for t in generate(["add2"], 7, split="heldout", seed=2)))
    comp = tmp_path / "c.jsonl"
    g = cli("generate", "--model", tiny_dir, "--tasks", str(tasks), "--out", str(comp), "--n", "2",
            "--temperature", "1.0", "--max-new-tokens", "6")
    assert g.returncode == 0, g.stderr[-2000:]
    rows = [json.loads(x) for x in comp.read_text().splitlines()]
    assert len(rows) == 14 and {"task_id", "completion", "sample"} <= set(rows[0])
    v = cli("verify", "--tasks", str(tasks), "--completions", str(comp), "--out", str(tmp_path / "v.jsonl"),
            "--workers", "0")
    assert v.returncode == 0, v.stderr
    e = cli("eval", "--model", tiny_dir, "--tasks", str(tasks), "--out", str(tmp_path / "e.json"),
            "--max-new-tokens", "6", "--n", "2")
    res = json.loads((tmp_path / "e.json").read_text())
    assert e.returncode == 0 and len(res["samples"]) == 7 and len(res["sampled"]) == 14


def test_verify_exits_non_zero_when_every_verdict_is_infra(tmp_path):
    tasks = tmp_path / "t.jsonl"
    # a judgeable-looking task whose gold query fails on its database: every verdict is infra
    tasks.write_text('{"id": "s", "kind": "sql", "prompt": "q", "schema_sql": "CREATE TABLE t (a INT)", '
                     '"gold_sql": "SELECT nope FROM t"}\n')
    comp = tmp_path / "c.jsonl"
    comp.write_text('{"task_id": "s", "completion": "```sql\\nSELECT a FROM t\\n```"}\n')
    r = cli("verify", "--tasks", str(tasks), "--completions", str(comp), "--out", str(tmp_path / "v.jsonl"),
            "--workers", "0")
    assert r.returncode == 3 and "infra" in r.stderr
