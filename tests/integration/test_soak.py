"""Soak: a thousand hostile completions from the probe suite mixed with honest ones in an RL-like verification
stream (batches of 32 through the persistent verifier pool). Afterwards every hostile one is rewarded 0, every
probe's host check is clean (nothing written, listened to, killed or left running on the host), no process of
the sandbox uids, no run cgroup and no sandbox temp dir is left behind.

Opt-in (minutes): ``RLVR_SOAK=1000 pytest -m slow tests/integration/test_soak.py -s`` (the number is how many
hostile completions; ``RLVR_SOAK=1`` means 1000). docs/faults.md has the measured numbers."""

import glob
import os
import time
from collections import Counter

import pytest

from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.pool import close_pools, verify_batch
from rlvr.verifiers.probes.code import ADD_TASK, PROBES

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("RLVR_SOAK"), reason="opt-in soak test: set RLVR_SOAK=1000")]

HONEST = "```python\ndef add(a, b):\n    return a + b\n```"
BATCH = 32


def _uid_procs(base: int) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if base <= uid < base + 4096:
            out.append(int(pid))
    return out


def _leftovers(base: int | None) -> dict:
    return {"uid_procs": _uid_procs(base) if base is not None else [],
            "cgroups": glob.glob("/sys/fs/cgroup/*/rlvr-sbx-*") + glob.glob("/sys/fs/cgroup/*/*/*/rlvr-sbx-*"),
            "tmp_dirs": glob.glob("/tmp/rlvr-sbx-*")}


def test_soak_hostile_stream_leaves_the_host_untouched():
    from rlvr.verifiers.sandbox.uids import uid_base

    n = int(os.environ["RLVR_SOAK"])
    n = 1000 if n == 1 else n
    before = _leftovers(uid_base())
    states = {p.name: p.setup(f"/tmp/rlvr-soak-{p.name}") if p.setup else None for p in PROBES}
    verifiers: dict[str, CodeVerifier] = {}
    stream = []  # (probe or None for honest, task, completion); 3 hostile : 1 honest
    for i in range(n):
        p = PROBES[i % len(PROBES)]
        stream.append((p, p.task, p.completion))
        if i % 3 == 2:
            stream.append((None, ADD_TASK, HONEST))
    t0 = time.perf_counter()
    results = []
    try:
        for s in range(0, len(stream), BATCH):
            batch = stream[s:s + BATCH]
            groups: dict[str, list[int]] = {}
            for j, (p, _, _) in enumerate(batch):
                groups.setdefault(repr(sorted((p.verifier_options if p else {}).items())), []).append(j)
            verdicts = [None] * len(batch)
            for key, idx in groups.items():
                opts = dict(eval(key))  # noqa: S307 - our own repr of a dict of numbers
                v = verifiers.setdefault(key, CodeVerifier(**{"timeout_s": 5.0, **opts}))
                out = verify_batch(v, [batch[j][1] for j in idx], [batch[j][2] for j in idx], workers=2,
                                   timeout_s=120)
                for j, verdict in zip(idx, out):
                    verdicts[j] = verdict
            results += [(p, v) for (p, _, _), v in zip(batch, verdicts)]
    finally:
        close_pools()
        effects = {p.name: p.host_check(states[p.name]) for p in PROBES if p.host_check}
    seconds = time.perf_counter() - t0
    after = _leftovers(uid_base())
    time.sleep(15)  # other sessions on a shared machine verify too: a leftover is one that is still there later
    later = _leftovers(uid_base())
    after = {k: [x for x in v if x in later[k] and x not in before[k]] for k, v in after.items()}
    before = {k: [] for k in before}
    hostile = [(p, v) for p, v in results if p is not None]
    honest = [v for p, v in results if p is None]
    rewarded = [(p.name, v.outcome, v.details) for p, v in hostile if v.reward != 0.0]
    unexpected = Counter(f"{p.name}:{v.outcome}" for p, v in hostile if v.outcome not in p.expected)
    print(f"\nsoak: {len(hostile)} hostile + {len(honest)} honest verifications in {seconds:.0f} s "
          f"({seconds / len(results):.2f} s each, 2 workers); hostile outcomes "
          f"{dict(Counter(v.outcome for _, v in hostile))}; honest {dict(Counter(v.outcome for v in honest))}; "
          f"unexpected outcomes {dict(unexpected)}; host effects {[k for k, e in effects.items() if e]}; "
          f"leftovers before {before} after {after}")
    assert not rewarded, rewarded[:5]
    assert not any(effects.values()), {k: e for k, e in effects.items() if e}
    assert after == before, (before, after)
    assert sum(v.passed for v in honest) >= 0.95 * len(honest)  # honest ones may time out on a loaded machine
