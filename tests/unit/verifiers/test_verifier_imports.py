"""`rlvr.verifiers` is a leaf: importing any of its modules loads neither torch nor transformers."""

import subprocess
import sys
from pathlib import Path

import rlvr

SRC = str(Path(rlvr.__file__).resolve().parents[1])

CHECK = """
import importlib, pkgutil, sys
import rlvr.verifiers as pkg
names = [m.name for m in pkgutil.walk_packages(pkg.__path__, 'rlvr.verifiers.') if not m.name.endswith('_math_worker')]
for n in names:
    importlib.import_module(n)
import rlvr.commands.verify, rlvr.commands.probe
bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules)
print(len(names), bad)
sys.exit(1 if bad else 0)
"""


def test_no_torch_or_transformers_import():
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=False,
                       env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert int(r.stdout.split()[0]) >= 8  # every module was imported
