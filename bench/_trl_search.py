"""TRL's fastest setting that fits: one short probe per (precision, micro-batch), the fastest that ran and fit.

Shared by ``bench/run.py --shape`` (GRPO, DPO, SFT against TRL at a real shape) and ``bench/time_to_accuracy.py``.
A probe that ran out of memory (the allocator's error, a ``MemoryError``, or the process killed) or whose peak
RSS is over the RAM cap is reported as such and never chosen: an out-of-memory is never counted as a win.
"""

from __future__ import annotations

import statistics

OOM_MARKS = ("out of memory", "memoryerror", "can't allocate memory", "cannot allocate memory",
             "exit code -9", "failed (-9)", "sigkill")
"""Text of a failure that means the probe did not fit (lower case): the allocator's errors, or the process killed
by SIGKILL (what the kernel's out-of-memory killer sends; a timeout is an ``error``)."""

PRECISIONS = ("fp32", "bf16")


def micro_candidates(rows: int) -> list[int]:
    """The micro-batches to try for a step of ``rows`` rows: the whole step, a half and a quarter (each
    dividing ``rows``; gradient accumulation makes up the step), largest first."""
    if rows < 1:
        raise ValueError(f"a step needs at least one row, not {rows}")
    return sorted({m for m in (rows, rows // 2, rows // 4) if m >= 1 and rows % m == 0}, reverse=True)


def settings_grid(rows: int, precisions=PRECISIONS, micros: list[int] | None = None) -> list[dict]:
    """Every ``{"precision", "micro"}`` to probe, float32 first."""
    return [{"precision": p, "micro": m} for p in precisions for m in (micros or micro_candidates(rows))]


def is_oom(text: str) -> bool:
    """Whether a probe's failure reads as running out of memory."""
    low = text.lower()
    return any(m in low for m in OOM_MARKS)


def step_median(step_s: list[float], skip: int = 1) -> float:
    """Median step time, the first ``skip`` (warm-up) dropped when more remain."""
    kept = step_s[skip:] or step_s
    return statistics.median(kept)


def search(settings: list[dict], probe, ram_cap_mb: float | None = None, say=None) -> tuple[dict | None, list[dict]]:
    """Probe each setting; ``(fastest that fit or None, every one tried)``.

    ``probe(setting) -> {"median_step_s", "peak_mb", ...}`` runs one short TRL run in its own process and raises
    on failure. Each entry of the list is the setting with ``status``: ``ok``, ``oom`` (out of memory),
    ``over_ram_cap`` (ran, peak RSS above ``ram_cap_mb``) or ``error`` (another failure, its text in ``error``);
    only ``ok`` entries can be chosen."""
    tried = []
    for s in settings:
        if say:
            say(f"TRL probe: {s['precision']}, micro-batch {s['micro']}")
        try:
            res = probe(s)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - a failed probe is a result
            text = f"{type(e).__name__}: {e}"
            tried.append({**s, "status": "oom" if is_oom(text) or isinstance(e, MemoryError) else "error",
                          "error": text[-600:]})
            continue
        over = ram_cap_mb is not None and res.get("peak_mb") is not None and res["peak_mb"] > ram_cap_mb
        tried.append({**s, **res, "status": "over_ram_cap" if over else "ok"})
    fit = [t for t in tried if t["status"] == "ok"]
    if not fit:
        return None, tried
    best = min(fit, key=lambda t: t["median_step_s"])
    return {"precision": best["precision"], "micro": best["micro"]}, tried
