"""``pip install .`` (not ``-e``) ships what ``rlvr quickstart`` and the native kernels need.

``src/rlvr/recipes`` is a symlink to the checkout's ``recipes/``; the wheel must hold real copies of the
recipe files, the C sources the native kernels compile from, and ``py.typed``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    pytest.importorskip("setuptools")
    out = tmp_path_factory.mktemp("wheel")
    # build from a clean copy, as from a fresh clone: a checkout's build/ folder can hold stale files that
    # setuptools would pack into the wheel
    src = tmp_path_factory.mktemp("checkout")
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("pyproject.toml", "README.md", "src", "recipes"):
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=junk)
        else:
            shutil.copy2(path, src / name)
    assert (src / "src" / "rlvr" / "recipes").is_symlink()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheels = list(out.glob("rlvr-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as z:
        return set(z.namelist())


def test_wheel_holds_every_recipe(wheel_names):
    """Every file of recipes/: the YAML files and the Python files they name (a game's teacher, a demonstrations
    script)."""
    recipes = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "recipes").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts)
    assert "recipes/quickstart.yaml" in recipes and "recipes/textarena_teacher.py" in recipes
    missing = [r for r in recipes if f"rlvr/{r}" not in wheel_names]
    assert not missing, f"recipes missing from the wheel: {missing}"


def test_wheel_holds_native_sources_and_py_typed(wheel_names):
    native = ROOT / "src" / "rlvr" / "accel" / "kernels"
    sources = [p.name for p in native.iterdir() if p.suffix in (".c", ".h", ".inc")]
    assert sources, "no native sources found in the checkout"
    missing = [s for s in sources if f"rlvr/accel/kernels/{s}" not in wheel_names]
    assert not missing, f"native sources missing from the wheel: {missing}"
    assert "rlvr/py.typed" in wheel_names


def test_wheel_holds_every_package_module(wheel_names):
    src = ROOT / "src"
    modules = sorted(p.relative_to(src).as_posix() for p in (src / "rlvr").rglob("*.py")
                     if "__pycache__" not in p.parts and "recipes" not in p.parts)
    missing = [m for m in modules if m not in wheel_names]
    assert not missing, f"modules missing from the wheel: {missing}"
    assert any(n.endswith("entry_points.txt") for n in wheel_names)
