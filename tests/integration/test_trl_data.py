"""TRL's data conventions, as files a TRL user already has, through `rlvr run`: prompt/completion and messages
JSONL for SFT, a `save_to_disk` folder for SFT / DPO / GRPO, KTO's `label`."""

import json
import os
import subprocess
import sys

import pytest

from rlvr.data.arithmetic import generate

RECIPE = """\
name: trl
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{type: jsonl, path: {held}}}, max_new_tokens: 8}}
stages:
  - {{type: sft, name: sft_pc, max_steps: 2, batch_size: 4, micro_batch_size: 4, save_every: 0,
     data: {{type: jsonl, path: {pc}}}}}
  - {{type: sft, name: sft_msgs, max_steps: 2, batch_size: 4, micro_batch_size: 4, save_every: 0,
     data: {{type: hf, path: {msgs_disk}}}}}
  - {{type: kto, max_steps: 2, batch_size: 4, micro_batch_size: 4, pairs: {{path: {kto}}}}}
  - {{type: dpo, max_steps: 2, batch_size: 4, micro_batch_size: 4, pairs: {{path: {pairs_disk}}}}}
  - {{type: grpo, max_steps: 1, tasks_per_step: 2, save_every: 0, sampling: {{group_size: 2, max_new_tokens: 8}},
     data: {{type: hf, path: {rl_disk}}}}}
"""


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def trl_files(tmp_path):
    from datasets import Dataset

    tasks = generate(["add2"], 12, seed=3)
    held = generate(["add2"], 4, split="heldout", seed=3)
    out = {"pc": write_jsonl(tmp_path / "pc.jsonl", [{"prompt": t.prompt, "completion": t.solution} for t in tasks]),
           "held": write_jsonl(tmp_path / "held.jsonl", [{"prompt": t.prompt, "answer": t.gold["answer"]} for t in held]),
           "kto": write_jsonl(tmp_path / "kto.jsonl", [{"prompt": t.prompt, "completion": t.solution, "label": i % 2 == 0}
                                                       for i, t in enumerate(tasks)])}
    msgs = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": t.prompt},
                          {"role": "assistant", "content": t.solution}]} for t in tasks]
    Dataset.from_list(msgs).save_to_disk(str(tmp_path / "msgs_disk"))
    pairs = [{"prompt": [{"role": "user", "content": t.prompt}], "chosen": [{"role": "assistant", "content": t.solution}],
              "rejected": [{"role": "assistant", "content": "\\boxed{0}"}]} for t in tasks]
    Dataset.from_list(pairs).save_to_disk(str(tmp_path / "pairs_disk"))
    rl = [{"prompt": [{"role": "user", "content": t.prompt}], "answer": t.gold["answer"], "source": "mine"} for t in tasks]
    Dataset.from_list(rl).train_test_split(test_size=0.25, seed=0).save_to_disk(str(tmp_path / "rl_disk"))
    return {**out, **{k: tmp_path / k for k in ("msgs_disk", "pairs_disk", "rl_disk")}}


def test_trl_formats_train_every_stage(tiny_dir, tmp_path, trl_files):
    recipe = tmp_path / "trl.yaml"
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, **trl_files))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "rlvr.cli", "run", str(recipe)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads((tmp_path / "run" / "summary.json").read_text())["stages"]
    assert [r["stage"] for r in rows] == ["sft_pc", "sft_msgs", "kto", "dpo", "grpo"]


def test_messages_rows_train_on_the_last_assistant_turn(tmp_path):
    from rlvr.config.data import JsonlTasks
    from rlvr.data.sources import load_task_source

    p = write_jsonl(tmp_path / "m.jsonl", [
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "1+1=?"},
                      {"role": "assistant", "content": "\\boxed{2}"}]},
        {"prompt": [{"role": "user", "content": "2+2=?"}], "completion": [{"role": "assistant", "content": "4"}]},
    ])
    a, b = load_task_source(JsonlTasks(path=str(p)))
    assert a.policy_messages() == [{"role": "system", "content": "S"}, {"role": "user", "content": "1+1=?"}]
    assert a.solution == "\\boxed{2}" and a.id == f"{p}:1"
    assert b.policy_messages() == [{"role": "user", "content": "2+2=?"}] and b.solution == "4"


def test_unknown_column_names_file_line_and_the_meta_escape_hatch(tmp_path):
    from rlvr.config.data import JsonlTasks
    from rlvr.data.sources import load_task_source
    from rlvr.errors import DataError

    p = write_jsonl(tmp_path / "m.jsonl", [{"prompt": "1+1=?", "anwser": "2"}])
    with pytest.raises(DataError, match=rf"{p}:1.*'anwser'.*meta"):
        load_task_source(JsonlTasks(path=str(p)))


def test_system_prompt_reaches_every_task(tmp_path):
    from rlvr.config.load import load_recipe
    from rlvr.config.recipe import with_system_prompt
    from rlvr.data.sources import load_task_source

    r = with_system_prompt(load_recipe(None, ["system_prompt=Think.", "stages=[{type: sft}]"]))
    for src in (r.stages[0].data, r.eval.tasks):
        t = load_task_source(src)[0]
        assert t.policy_messages()[0] == {"role": "system", "content": "Think."}
