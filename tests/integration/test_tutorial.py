"""docs/tutorial.md, run as written: its files are written, its commands run in order in an empty folder,
and every recipe key / data field it uses is documented (docs/recipes.md, docs/data.md)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"```(\w+)(?: title=\"([^\"]+)\")?\n(.*?)```", re.S)


def blocks():
    return BLOCK.findall((DOCS / "tutorial.md").read_text())


def keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from keys(v)


def test_every_recipe_key_and_data_field_the_tutorial_uses_is_documented():
    from rlvr.config.docs import documented_keys

    recipes_md, data_md = (DOCS / "recipes.md").read_text(), (DOCS / "data.md").read_text()
    ymls = [yaml.safe_load(body) for lang, _, body in blocks() if lang == "yaml"]
    assert ymls, "the tutorial has no recipe"
    used = {k for y in ymls for k in keys(y)}
    missing = sorted(k for k in used if k not in documented_keys() or f"`{k}`" not in recipes_md)
    assert not missing, f"recipe keys used in docs/tutorial.md but not documented in docs/recipes.md: {missing}"
    fields = set(re.findall(r'"(\w+)": ', "".join(b for _, t, b in blocks() if t == "make_data.py")))
    assert fields and all(f"`{f}`" in data_md for f in fields), fields


def run(cmd, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=1800)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


# the default suite runs the tutorial with its stages cut to a few steps; the slow test runs it as written
SHORT = ["--set", "stages.sft.max_steps=6", "--set", "stages.grpo.max_steps=2", "--set", "stages.grpo.tasks_per_step=4"]


def run_tutorial(folder, run_args=()):
    """Write the tutorial's files and run its commands in order in ``folder`` (``run_args`` appended to
    ``rlvr run``); returns what its Python block printed."""
    printed = ""
    for lang, title, body in blocks():
        if title:
            (folder / title).write_text(body)
        elif lang == "bash":
            for line in filter(None, (ln.strip() for ln in body.splitlines())):
                argv = shlex.split(line)
                if argv[0] == "rlvr":
                    argv = [sys.executable, "-m", "rlvr.cli", *argv[1:], *(run_args if argv[1] == "run" else ())]
                elif argv[0] == "python":
                    argv = [sys.executable, *argv[1:]]
                run(argv, folder)
        elif lang == "python":
            printed = run([sys.executable, "-c", body], folder).stdout
    return printed


def check_everything_it_promises(folder, printed):
    run_dir = folder / "runs" / "tutorial"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["base", "sft", "grpo"]
    assert (run_dir / "report.html").is_file()
    for stage in ("sft", "grpo"):
        for name in ("metrics.jsonl", "eval.json", "final/config.json"):
            assert (run_dir / stage / name).is_file(), f"{stage}/{name} missing"
    recs = [json.loads(x) for x in (run_dir / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert any("reward/steps_add_up" in r for r in recs)  # the custom reward ran
    samples = [json.loads(x) for x in (run_dir / "grpo" / "samples.jsonl").read_text().splitlines()]
    assert samples and {"completion", "reward"} <= set(samples[0])
    assert json.loads((folder / "eval.json").read_text())["n_tasks"] == 200
    assert printed.strip(), "loading the checkpoint with AutoModelForCausalLM generated nothing"
    return {s["stage"]: s["pass_at_1"] for s in summary["stages"]}


def test_tutorial_runs_end_to_end(tmp_path):
    check_everything_it_promises(tmp_path, run_tutorial(tmp_path, SHORT))


@pytest.mark.slow
def test_tutorial_as_written_gains_twenty_points_held_out(tmp_path):
    got = check_everything_it_promises(tmp_path, run_tutorial(tmp_path))
    assert got["grpo"] - got["base"] >= 0.20, got
