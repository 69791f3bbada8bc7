"""Verifiers with known misbehaviour for the pool tests (imported by the worker processes too)."""

import os
import time

from rlvr.verifiers.base import Verdict


class Hostile:
    """Judges by completion text: hang, die, raise, garbage, or pass (with the worker's pid)."""

    name = "hostile"

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    def verify(self, task, completion):
        if completion == "hang":
            time.sleep(3600)
        if completion == "spin":  # hangs on the CPU
            while True:
                pass
        if completion == "die":
            os._exit(3)
        if completion == "raise":
            raise RuntimeError("boom")
        if completion == "garbage":
            return "not a verdict"
        if completion == "spawn-hang":  # a helper process that would outlive a careless kill
            import subprocess

            subprocess.Popen(["sleep", "3600"])
            time.sleep(3600)
        return Verdict(1.0, True, "pass", {"pid": os.getpid(), "task": task.id, "tag": self.tag})
