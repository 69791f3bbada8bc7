"""Importing rlvr's trainers and CLI loads none of the heavy optional packages.

Peak memory is an acceptance line against TRL (bench/run.py measures each trainer's own process): a
module-level import of sympy (~33 MB resident), scipy (~35 MB), datasets/pandas/pyarrow (~80 MB) or
transformers' model code (~170 MB with what it pulls in) would be paid by every rlvr process, including
the CLI's ``--help`` and the verifier workers. They are imported where they are used.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"
OPTIONAL = [m for m in ("scipy", "accelerate") if importlib.util.find_spec(m) is not None]
"""The packages rlvr hides from transformers' first import that this environment has (scipy is installed by
no extra of rlvr's: the tests run with and without it)."""
HEAVY = ("sympy", "scipy", "math_verify", "latex2sympy2_extended", "datasets", "pandas", "pyarrow", "trl", "accelerate",
         "transformers", "torch._dynamo")


def test_trainer_and_cli_imports_load_no_heavy_package():
    code = ("import json, sys\n"
            "import rlvr.cli, rlvr.trainers.rl, rlvr.trainers.preference, rlvr.trainers.sft, rlvr.verifiers.judge\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing rlvr's trainers/CLI loaded {loaded}: import them where they are used"


LEAN_RUN = """
import json, sys
import torch
from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.checkpoint import save_pretrained_atomic
from rlvr.models.tiny import build_tiny

out = sys.argv[1]
build_tiny(out + "/m", size="test", seed=0)
model, tok = load_model_and_tokenizer(ModelConfig(path=out + "/m", device="cpu", implementation="hf"))  # transformers' class
ids = torch.tensor([tok("12*3=")["input_ids"]])
logits = model(ids).logits
logits.float().pow(2).mean().backward()                       # a backward through the HF model
gen = model.generate(ids, max_new_tokens=4, do_sample=False)  # transformers' generate
save_pretrained_atomic(model, tok, out + "/saved")           # save_pretrained
torch.save({"logits": logits.detach(), "gen": gen}, out + "/lean.pt")
seen = [m for m in ("scipy", "accelerate") if m in sys.modules]
lora = load_model_and_tokenizer(ModelConfig(path=out + "/saved", device="cpu", lora=LoraConfig(r=2)))[0]
for name in sys.argv[2:]:                                     # still importable afterwards (peft needs accelerate)
    __import__("scipy.optimize" if name == "scipy" else name)
print(json.dumps({"hidden_while_loading": seen, "lora_params": sum(p.numel() for p in lora.parameters() if p.requires_grad)}))
"""


def _lean_run(tmp: Path, optional: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    env.pop("RLVR_HF_OPTIONAL", None)
    if optional:
        env["RLVR_HF_OPTIONAL"] = "1"
    tmp.mkdir()
    out = subprocess.run([sys.executable, "-c", LEAN_RUN, str(tmp), *OPTIONAL], capture_output=True, text=True, env=env,
                         timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_model_load_imports_neither_scipy_nor_accelerate(tmp_path):
    # rlvr.models.hf.import_transformers: transformers' first import sees scipy and accelerate as absent
    # (~55 MB resident saved in every trainer process); load, backward, generate and save still work, and
    # both packages import normally afterwards (LoRA through peft needs accelerate).
    lean = _lean_run(tmp_path / "lean", False)
    assert lean["hidden_while_loading"] == [], f"loading a model imported {lean['hidden_while_loading']}"
    assert lean["lora_params"] > 0


@pytest.mark.slow
def test_hiding_scipy_and_accelerate_changes_no_output(tmp_path):
    # The same script with RLVR_HF_OPTIONAL=1 (transformers sees both) gives identical logits and generation.
    import torch

    lean, full = _lean_run(tmp_path / "lean", False), _lean_run(tmp_path / "full", True)
    assert full["hidden_while_loading"] == OPTIONAL  # what the switch turns off
    assert lean["lora_params"] == full["lora_params"] > 0
    a, b = torch.load(tmp_path / "lean" / "lean.pt"), torch.load(tmp_path / "full" / "lean.pt")
    assert torch.equal(a["logits"], b["logits"]) and torch.equal(a["gen"], b["gen"])


def test_import_transformers_hides_nothing_once_transformers_is_imported():
    # transformers caches its availability answers at its first import: hiding a package it already
    # believes present would make its later imports fail, so import_transformers must leave it alone.
    code = ("import sys, transformers\n"
            "from rlvr.models.hf import import_transformers\n"
            "import_transformers()\n"
            "from transformers import LlamaForCausalLM\n"
            "print(sorted(m for m in ('scipy', 'accelerate') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == str(sorted(OPTIONAL))
