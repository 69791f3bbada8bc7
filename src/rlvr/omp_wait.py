"""How idle OpenMP threads wait between torch's parallel ops: chosen per run, before torch loads.

torch's CPU kernels run on a libgomp thread team. Between two parallel ops an idle thread either spins
(and picks the next op up at once) or sleeps (and is woken through the kernel, tens of microseconds an op):

- ``passive`` (``OMP_WAIT_POLICY=PASSIVE``): sleep at once. Safe when something else holds a core (verifier
  processes, Ray workers, torchrun ranks): a thread that spins while its team-mate waits for a core slows
  training 5-8x (measured: a GRPO update on the 5m tiny model with one core held by a busy loop, 1.3 s passive,
  2.8 s with a 10k spin, 17 s with a 100k spin).
- ``spin`` (``GOMP_SPINCOUNT`` = :data:`SPIN_COUNT`, no wait policy): spin that many rounds (about a
  millisecond here), then sleep. On cores the run has to itself the training step's many small ops stop
  paying a wake-up each: the same GRPO update 1.1-1.3 s passive, 0.6-0.8 s with the spin.

A recipe's ``omp_wait: auto`` (the default) picks ``spin`` unless the run shares the cores with other
work by design (:func:`shares_cores`) or other processes keep the cores busy when it starts
(:func:`busy_cpus`; a job started later on the same cores is not seen: give such runs ``omp_wait: passive``).
A policy the user set (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` in the environment when rlvr starts) is never
changed, and nothing changes once torch has loaded: libgomp reads these variables when it loads. This module
imports nothing heavy.
"""

from __future__ import annotations

import os
import sys

SPIN_COUNT = 100_000
"""``GOMP_SPINCOUNT`` of ``spin``: the best of 1k / 3k / 10k / 100k / unbounded on the 5m GRPO update and
DPO step (2 cores, idle host, 2026-12-03)."""

USER_SET = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
"""The user chose the wait policy before rlvr started (then rlvr leaves it alone)."""


def default_wait() -> None:
    """The safe default until a run says otherwise: ``passive`` (unless the user chose)."""
    if not USER_SET:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def shares_cores(recipe) -> str | None:
    """Why ``recipe``'s run shares this machine's cores with the trainer while it trains (None: it does not)."""
    dist = recipe.distributed
    if dist.backend == "ray":
        return "distributed.backend: ray (rollout workers and verifier actors on the trainer's cores)"
    if int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")) or 1) > 1:
        return "torchrun ranks on one machine"
    for st in recipe.stages:
        rollout = getattr(st, "rollout", None)
        if getattr(rollout, "closed_loop", False):
            return f"stage {st.name}: multi-turn rollouts (environment tools in threads and processes)"
    return None


def busy_cpus(seconds: float = 0.2) -> float | None:
    """CPUs' worth of work other processes did over the next ``seconds`` (``/proc/stat``; this process is
    asleep meanwhile), None where that cannot be read."""
    import time

    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)  # total, idle + iowait
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if t1 <= t0:
        return None
    return (1 - (i1 - i0) / (t1 - t0)) * (os.cpu_count() or 1)


def choose(recipe, busy: float | None = -1.0) -> tuple[str, str]:
    """``(mode, why)`` for ``recipe.omp_wait`` (``auto`` resolved). ``busy``: CPUs other processes use now
    (default: measured by :func:`busy_cpus`; None: unknown) -- a machine without a free core for each of the
    run's threads gets ``passive`` too."""
    if recipe.omp_wait != "auto":
        return recipe.omp_wait, f"omp_wait: {recipe.omp_wait}"
    why = shares_cores(recipe)
    if why:
        return "passive", why
    cpus = os.cpu_count() or 1
    busy = busy_cpus() if busy == -1.0 else busy
    threads = min(recipe.threads or cpus, cpus)
    if busy is not None and cpus - busy < threads - 0.5:
        return "passive", f"other processes keep {busy:.1f} of {cpus} CPUs busy (the run uses {threads} threads)"
    return "spin", "omp_wait: auto, the run has the cores to itself"


def _fixed() -> str | None:
    """Why rlvr may no longer choose (None: it may)."""
    if USER_SET:
        return "user: " + ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
                                    if k in os.environ)
    if "torch" in sys.modules:
        return "fixed: torch already loaded"
    return None


def apply(mode: str) -> str:
    """Set the environment for ``mode`` (``spin`` / ``passive``) if rlvr may still choose; returns the policy
    in effect: ``passive``, ``spin``, or ``user: <variables>`` / ``fixed: torch already loaded``."""
    fixed = _fixed()
    if fixed is not None:
        return fixed
    set_env(mode)
    return mode


def apply_for(recipe) -> str:
    """:func:`apply` of :func:`choose`'s mode for ``recipe``; nothing is measured when rlvr may not choose."""
    return _fixed() or apply(choose(recipe)[0])


def set_env(mode: str) -> None:
    """Write ``mode``'s variables into ``os.environ`` (whatever was there: the caller decides)."""
    if mode == "spin":
        os.environ.pop("OMP_WAIT_POLICY", None)
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    elif mode == "passive":
        os.environ.pop("GOMP_SPINCOUNT", None)
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        raise ValueError(f"omp_wait mode {mode!r}: expected spin or passive")


def in_effect() -> str:
    """The wait policy this process's environment holds (libgomp read it when torch loaded; :func:`apply`
    changes nothing after that): ``spin (GOMP_SPINCOUNT=N)``, ``passive``, ``OMP_WAIT_POLICY=X`` or
    ``libgomp default``."""
    policy, spin = os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT")
    if spin is not None and policy is None:
        return f"spin (GOMP_SPINCOUNT={spin})"
    if policy is not None and policy.upper() == "PASSIVE" and spin is None:
        return "passive"
    if policy is None:
        return "libgomp default"
    return f"OMP_WAIT_POLICY={policy}" + (f", GOMP_SPINCOUNT={spin}" if spin is not None else "")


def spins() -> bool:
    """Idle OpenMP threads of this process spin before they sleep: a ``GOMP_SPINCOUNT`` above 0 (libgomp lets it
    win over the policy), else any policy but ``PASSIVE`` (libgomp's default spins too)."""
    spin = os.environ.get("GOMP_SPINCOUNT")
    if spin is not None:  # libgomp: an explicit spin count wins over the policy
        try:
            return float(spin.strip().lower().rstrip("kmgt") or 0) > 0
        except ValueError:
            pass
    return (os.environ.get("OMP_WAIT_POLICY") or "").upper() != "PASSIVE"
