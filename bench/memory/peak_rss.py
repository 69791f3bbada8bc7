"""Peak RSS of rlvr's side of bench/grpo_vs_trl.py, alone: ``VmHWM`` after each update of a short GRPO run.

    PYTHONPATH=src:bench python bench/memory/peak_rss.py [--size 1m] [--steps 6]

Prints (VmHWM, VmRSS) in MB after every policy update and at the end (docs/packed_forward.md, "Fewer saved
tensors"; docs/benchmarks.md). Set RLVR_HEAP=trim or RLVR_HEAP=glibc to compare with the heap trim or glibc's defaults (rlvr/trainers/heap.py).
"""
import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: F401,E402  (threads and OMP_WAIT_POLICY before torch)


def mem() -> tuple[int, int]:
    s = open("/proc/self/status").read()
    return tuple(int(re.search(rf"{k}:\s+(\d+)", s).group(1)) // 1024 for k in ("VmHWM", "VmRSS"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="1m")
    p.add_argument("--steps", type=int, default=6)
    a = p.parse_args()
    from grpo_vs_trl import parse_args, rlvr_stage

    import rlvr.trainers.rl as rl_mod
    from rlvr.config.model import ModelConfig
    from rlvr.models.tiny import build_tiny

    b = parse_args(["--size", a.size, "--steps", str(a.steps)])
    work = Path(tempfile.mkdtemp())
    build_tiny(str(work / "model"), size=b.size, seed=0)
    inner = rl_mod.policy_update

    def update(*x, **k):
        out = inner(*x, **k)
        print("after update (VmHWM, VmRSS) MB:", mem(), flush=True)
        return out

    rl_mod.policy_update = update
    rl_mod.train_rl(rlvr_stage(b, b.prompts * b.steps * 2), ModelConfig(path=str(work / "model")), work / "run", seed=0)
    print("end (VmHWM, VmRSS) MB:", mem())


if __name__ == "__main__":
    main()
