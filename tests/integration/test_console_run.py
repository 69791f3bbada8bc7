"""What a run prints with stdout to a pipe: the header, the held-out results as they are computed, never a long
silence (a slow pair-building phase is filled by heartbeat lines naming it), full-width tables, and a stage cut by
its time cap saying so — then ``rlvr report`` and ``rlvr watch`` on the same run."""

import json
import os
import sys
import threading
import time

import pytest

from rlvr.verifiers.base import Verdict

PAIR_ROWS = 24 * 4   # the pair builder judges 24 prompts x 4 samples in one call
SLOW_S = 3.0         # how long that call takes here (a "silent" phase)
QUIET_S = 0.3        # the heartbeat's quiet interval in this test (RLVR_HEARTBEAT_S)

RECIPE = """\
name: console
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2, mul21], n: 8, split: heldout}}, max_new_tokens: 8}}
stages:
  - {{type: sft, name: sft, max_steps: 6, batch_size: 8, micro_batch_size: 8, eval_every: 3,
     data: {{families: [add2], n: 64}}, optim: {{lr: 0.003, warmup_steps: 0}}}}
  - type: preference
    name: dpo
    pairs: {{tasks: {{families: [add2], n: 24}}, samples_per_task: 4, max_new_tokens: 8, temperature: 1.0}}
    max_steps: 2
    batch_size: 4
    micro_batch_size: 4
  - {{type: rl, name: grpo, max_steps: 40, max_minutes: 0.0001, tasks_per_step: 2, eval_every: 20,
     sampling: {{group_size: 4, max_new_tokens: 8}}, data: {{families: [add2], n: 64}}}}
"""


def parity_judge(tasks, completions):
    """Even-length completions pass (a mix of passes and failures, so pairs exist); the pair builder's call is slow."""
    if len(completions) == PAIR_ROWS:
        time.sleep(SLOW_S)
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


@pytest.fixture(scope="module")
def piped_run(tiny_dir, tmp_path_factory):
    """Run the recipe in this process with stdout an OS pipe; every line read back with the time it arrived.
    report.html is written without its plots (matplotlib's import and drawing cost seconds and are not the
    subject here; the heartbeat covers them like any phase)."""
    from rlvr.commands.run import execute
    from rlvr.monitoring import report

    d = tmp_path_factory.mktemp("console")
    recipe = d / "recipe.yaml"
    recipe.write_text(RECIPE.format(run_dir=d / "run", model=tiny_dir))
    r, w = os.pipe()
    lines: list[tuple[float, str]] = []

    def read():
        with os.fdopen(r, encoding="utf-8") as f:
            for line in f:
                lines.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    saved, env = sys.stdout, {k: os.environ.get(k) for k in ("RLVR_HEARTBEAT_S", "COLUMNS")}
    os.environ["RLVR_HEARTBEAT_S"] = str(QUIET_S)
    os.environ.pop("COLUMNS", None)
    sys.stdout = os.fdopen(w, "w", buffering=1, encoding="utf-8")
    plot, report._plot_stage = report._plot_stage, lambda records, title: None
    try:
        summary = execute(str(recipe), judge=parity_judge)
    finally:
        sys.stdout.close()
        sys.stdout, report._plot_stage = saved, plot
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reader.join(timeout=10)
    return d / "run", lines, summary


def text(piped_run) -> str:
    return "\n".join(line for _, line in piped_run[1])


def test_the_run_starts_with_a_header_naming_run_dir_model_stages_and_compute(piped_run, tiny_dir):
    run_dir, lines, _ = piped_run
    head = [line for _, line in lines[:8]]
    assert any(line.startswith("run dir") and str(run_dir) in line for line in head), head
    assert any(line.startswith("recipe") and line.endswith("recipe.yaml") for line in head), head
    model = next(line for line in head if line.startswith("model"))
    assert tiny_dir in model and "M parameters" in model
    stages = next(line for line in head if line.startswith("stages"))
    assert "sft (sft): 6 steps, eval every 3" in stages and "dpo (preference): 2 steps" in stages
    assert "grpo (rl): 40 steps, time cap 0.0001 min, eval every 20" in stages
    compute = next(line for line in head if line.startswith("compute"))
    assert "cpu" in compute and "1 thread " in compute and "float32" in compute


def test_held_out_results_are_printed_when_computed(piped_run):
    out = text(piped_run)
    for step in (0, 3, 6):  # eval_every 3 over 6 steps
        assert f"sft:sft step {step}/6: held-out pass@1 " in out, out
    assert "(add2 " in out and "mul21 " in out  # per family


def test_no_gap_longer_than_the_heartbeat_even_through_a_slow_phase(piped_run):
    _, lines, _ = piped_run
    times = [t for t, _ in lines]
    gaps = [b - a for a, b in zip(times, times[1:])]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    # without the heartbeat the slow pair-building call alone is a 2.5 s silence
    assert gaps[worst] < SLOW_S / 2, (gaps[worst], lines[worst][1], lines[worst + 1][1])
    beats = [line for _, line in lines if "dpo: building preference pairs: judging 96 samples" in line]
    assert len(beats) >= 3, text(piped_run)
    assert "dpo: " in text(piped_run) and "training pairs" in text(piped_run)  # the pairs line after building


def test_a_stage_cut_by_its_time_cap_says_so(piped_run):
    run_dir, _, summary = piped_run
    out = text(piped_run)
    assert "rl:grpo stopped by its time cap (max_minutes 0.0001) after step 1 of 40 planned" in out, out
    row = next(r for r in summary["stages"] if r["stage"] == "grpo")
    assert row["time_cap"] == {"steps_done": 1, "steps_planned": 40, "max_minutes": 0.0001}
    saved = json.loads((run_dir / "summary.json").read_text())
    assert next(r for r in saved["stages"] if r["stage"] == "grpo")["time_cap"]["steps_done"] == 1
    assert "grpo: cut by its time cap (max_minutes 0.0001) after 1 of 40 planned steps" in out
    assert not any("time_cap" in r for r in saved["stages"] if r["stage"] != "grpo")
    events = [json.loads(x) for x in (run_dir / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert {"event": "time_cap", "steps_done": 1, "steps_planned": 40}.items() <= events[-1].items()


def test_the_summary_table_is_whole_in_a_pipe(piped_run):
    out = text(piped_run)
    assert "…" not in out
    assert any("stage" in line and "pass@1 add2" in line and "pass@1 mul21" in line and "wall s" in line
               for line in out.splitlines())


def test_report_prints_every_stage_summary_losses_and_health(piped_run, capsys, monkeypatch):
    from rlvr.commands.report import report_command
    from rlvr.monitoring import report

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(report, "_plot_stage", lambda records, title: None)  # the tables are the subject
    report_command(str(piped_run[0]))
    out = capsys.readouterr().out
    assert "held-out evaluation by stage" in out and "grpo: cut by its time cap" in out
    for title in ("sft: losses", "dpo: losses", "grpo: losses", "grpo: health"):
        assert title in out, out
    sft = out[out.index("sft: losses"):out.index("dpo: losses")]
    assert "loss" in sft and "lr" in sft and "held-out pass@1" in sft
    assert "…" not in out


def test_watch_shows_losses_and_stage_summaries(piped_run, capsys, monkeypatch):
    from rlvr.commands.report import watch_command

    monkeypatch.delenv("COLUMNS", raising=False)
    watch_command(str(piped_run[0]), interval=0.1, once=True)
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("sft step 6 | loss ") for line in out), out
    assert any(line.startswith("dpo step 2 | loss ") and "pair_acc" in line for line in out), out
    done = [line for line in out if " done: " in line]
    assert [line.split()[0] for line in done] == ["sft", "dpo", "grpo"]
    assert "held-out pass@1" in done[0]
    assert any("grpo: cut by its time cap" in line for line in out)
    assert any("held-out evaluation by stage" in line for line in out)  # the table once the run is done

