"""The single-process path imports and runs with ray hidden (an import hook makes ``import ray`` fail, as
on a machine without it); asking for the Ray backend then fails at once, saying how to install it."""

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"

SCRIPT = r'''
import sys

class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray' (hidden by the test)")
        return None

sys.meta_path.insert(0, NoRay())
import importlib.util
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] == "ray" else _find(name, *a)

import rlvr, rlvr.cli, rlvr.pipeline, rlvr.distributed, rlvr.distributed.torch_dist, rlvr.rollout.prefetch
from rlvr.config.data import BuiltinArithmetic
from rlvr.config.distributed import DistributedConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.distributed import make_context
from rlvr.trainers.parallel import LOCAL
from rlvr.trainers.rl import train_rl
from rlvr.verifiers.base import Verdict

assert make_context(DistributedConfig()) is LOCAL
st = RLStage(data=BuiltinArithmetic(families=["add2"], n=8), sampling=SamplingConfig(group_size=2, max_new_tokens=4),
             max_steps=1, tasks_per_step=2, save_every=0)
judge = lambda tasks, comps: [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "wrong") for c in comps]
res = train_rl(st, ModelConfig(path=sys.argv[1]), sys.argv[2], judge=judge)
assert res.steps == 1
try:
    make_context(DistributedConfig(backend="ray"))
    raise SystemExit("the ray backend was built without ray")
except ImportError as e:
    assert "pip install 'rlvr[ray]'" in str(e), e
assert not any(m == "ray" or m.startswith("ray.") for m in sys.modules), [m for m in sys.modules if m.startswith("ray")]
print("OK without ray")
'''.replace("importlib.util.find_spec = ", "_find = importlib.util.find_spec; importlib.util.find_spec = ")


def test_single_process_path_runs_without_ray(tiny_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", SCRIPT, tiny_dir, str(tmp_path / "run")], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0 and "OK without ray" in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
