"""Compile and load rlvr's small C kernels (``rlvr/accel/kernels/*.c``) with the machine's C compiler, once per
source and machine, and cache the shared library.

No torch headers, no Python C API: each ``.c`` file (with the directory's ``.h`` / ``.inc`` files) is plain C
loaded with :mod:`ctypes`, so compiling takes ~1 s and needs only ``cc`` (gcc or clang). ``-march=native`` tunes
the loops for this CPU, so the cache key is the sources' hash, the flags, the compiler's version and the CPU's
model and flags (a home directory shared by different machines gets one library per CPU). ``-fopenmp`` links
``libgomp.so.1`` by name, which resolves to the runtime torch has already loaded: the kernels' threads are torch's
pool. The library is written to a temporary name and renamed
(atomic: concurrent processes never load a half-written file).

Where: ``$RLVR_KERNELS_CACHE``, else ``$XDG_CACHE_HOME/rlvr/native``, else ``~/.cache/rlvr/native``.
``RLVR_KERNELS=0`` (older name: ``RLVR_NATIVE=0``) turns every kernel off (callers then take their PyTorch
path); so does a missing compiler or a failed build, logged once with the reason. :func:`load` returns None in
those cases.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared", "-std=gnu99", "-fopenmp")
_loaded: dict[str, ctypes.CDLL | None] = {}


def enabled() -> bool:
    """False when ``RLVR_KERNELS`` (or its older name ``RLVR_NATIVE``) is ``0``, ``off``, ``false`` or ``no``."""
    return all(os.environ.get(name, "1").strip().lower() not in ("0", "off", "false", "no")
               for name in ("RLVR_KERNELS", "RLVR_NATIVE"))


def cache_dir() -> Path:
    env = os.environ.get("RLVR_KERNELS_CACHE") or os.environ.get("RLVR_NATIVE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlvr" / "native"


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


@functools.lru_cache(maxsize=1)
def _cpu_id() -> str:
    """The CPU's model name and feature flags (what ``-march=native`` compiles for)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = [ln for ln in f if ln.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(info)))
    except OSError:
        return platform.processor() or platform.machine()


@functools.cache
def _cc_version(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _key(src: bytes, cc: str) -> str:
    h = hashlib.sha256(src)
    for part in (" ".join(FLAGS), _cc_version(cc), _cpu_id(), platform.machine()):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def _build(name: str) -> Path:
    """The cached library for ``name``.c, compiled now if missing. Raises RuntimeError saying why it cannot."""
    src_path = HERE / f"{name}.c"
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    src = src_path.read_bytes() + b"".join(p.read_bytes() for p in sorted(HERE.glob("*.h")) + sorted(HERE.glob("*.inc")))
    out_dir = cache_dir()
    lib = out_dir / f"{name}-{_key(src, cc)}.so"
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        res = subprocess.run([cc, *FLAGS, "-o", tmp, str(src_path), "-lm"], capture_output=True, text=True, check=False,
                             timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"{cc} failed on {src_path}: {res.stderr.strip()[-2000:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def load(name: str, signatures: dict[str, list] | None = None) -> ctypes.CDLL | None:
    """``rlvr/accel/kernels/<name>.c`` compiled and loaded (cached per process), or None when the kernels are off
    or cannot be built here (the reason is logged once). ``signatures``: each function's ctypes argument types
    (all return an int status), set when the library is first loaded."""
    if not enabled():
        return None
    if name not in _loaded:
        try:
            lib = ctypes.CDLL(str(_build(name)))
            for fn, args in (signatures or {}).items():
                getattr(lib, fn).argtypes, getattr(lib, fn).restype = args, ctypes.c_int
            _loaded[name] = lib
        except (OSError, RuntimeError, AttributeError, subprocess.SubprocessError) as e:
            log.warning("rlvr C kernel %s unavailable, using the PyTorch path: %s", name, e)
            _loaded[name] = None
    return _loaded[name]


@functools.lru_cache(maxsize=1)
def torch_sgemm() -> int | None:
    """The address of the Fortran ``sgemm_`` that torch's CPU build carries (MKL's, in libtorch_cpu), or None
    when this torch build exports none."""
    import torch

    libdir = Path(torch.__file__).resolve().parent / "lib"
    for cand in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        path = libdir / cand
        if path.exists():
            try:
                return ctypes.cast(ctypes.CDLL(str(path)).sgemm_, ctypes.c_void_p).value
            except (OSError, AttributeError):
                return None
    return None
