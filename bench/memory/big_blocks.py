"""The bench's GRPO stage (``bench/grpo_phases.py``) with the live malloc blocks of 32 KB and more counted
between its phases: live MB, the phase's peak, the peak's histogram by power of two, and the heap's arena and
in-use bytes (glibc ``mallinfo2``); with ``--sizes-at K`` the sizes of the blocks live after the K-th phase.

    gcc -O2 -shared -fPIC -o /tmp/big_blocks.so bench/memory/big_blocks.c -ldl
    LD_PRELOAD=/tmp/big_blocks.so PYTHONPATH=src python bench/memory/big_blocks.py --size 5m --steps 8 --sizes-at 30

Used for "What the 5m GRPO process's memory is" in docs/benchmarks.md (session 18). Needs glibc (mallinfo2).
"""
import collections
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                                 "uordblks", "fordblks", "keepcost")]


def main(argv):
    sizes_at = None
    if "--sizes-at" in argv:
        i = argv.index("--sizes-at")
        sizes_at = int(argv[i + 1])
        del argv[i:i + 2]
    hook = ctypes.CDLL(None)
    if not hasattr(hook, "mt_live"):
        sys.exit("big_blocks.py: run it with LD_PRELOAD=<big_blocks.so> (see the module doc)")
    for name in ("mt_live", "mt_peak", "mt_peakhist", "mt_sizes"):
        getattr(hook, name).restype = ctypes.c_size_t
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    import grpo_phases

    status, calls = grpo_phases.vm_status, [0]

    def report() -> str:
        calls[0] += 1
        m = libc.mallinfo2()
        hist = " ".join(f"{(1 << b) >> 10}K:{hook.mt_peakhist(b)}" for b in range(15, 40) if hook.mt_peakhist(b))
        line = (f"{status()} | arena {m.arena >> 20} MB in use {m.uordblks >> 20} MB | big blocks live "
                f"{hook.mt_live() >> 20} MB, phase peak {hook.mt_peak() >> 20} MB [{hist}]")
        hook.mt_reset()
        if calls[0] == sizes_at:
            buf = (ctypes.c_size_t * 200000)()
            n = hook.mt_sizes(buf, 200000)
            count = collections.Counter(buf[i] for i in range(n))
            for size, k in sorted(count.items(), key=lambda x: -x[0] * x[1])[:20]:
                line += f"\n    {size:>10} B x{k:<4} = {size * k / 2 ** 20:7.2f} MB"
        return line

    grpo_phases.vm_status = report
    grpo_phases.main(argv + (["--rss"] if "--rss" not in argv else []))


if __name__ == "__main__":
    main(sys.argv[1:])
