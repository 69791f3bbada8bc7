"""The RL trainer's side of held-out tests for code tasks (``health.code_tests``, see
:mod:`rlvr.verifiers.heldout_split`): hand the training verifier the training pool (rotated), then run the
completions that passed it on the held-out tests."""

from __future__ import annotations

from rlvr.verifiers.heldout_split import heldout_task, training_task


class TestGuard:
    """``training(tasks, step)`` before the rollout; ``measure(ro, judge)`` after it."""

    __test__ = False  # not a pytest class

    def __init__(self, cfg, seed: int):
        self.cfg, self.seed = cfg, seed
        self.step, self.orig = -1, {}

    def training(self, tasks: list, step: int) -> list:
        if step != self.step:  # the originals of this step's tasks only (dynamic sampling draws several rounds)
            self.step, self.orig = step, {}
        out = []
        for t in tasks:
            self.orig[t.id] = t
            out.append(training_task(t, self.cfg.heldout_frac, self.seed, step, self.cfg.rotate_every,
                                     self.cfg.rotate_frac))
        return out

    def measure(self, ro, judge) -> dict:
        """``verifier/train_tests_pass`` (samples passing the training tests), ``verifier/heldout_tests_pass``
        (... and the held-out ones) and ``verifier/overfit_frac`` (the first minus the second), over the
        samples of tasks whose tests were split."""
        G, idx, held, comps = ro.group_size, [], [], []
        n = 0
        for i, t in enumerate(ro.tasks):
            h = heldout_task(self.orig.get(t.id, t), self.cfg.heldout_frac, self.seed)
            if h is None:
                continue
            n += G
            for g in range(G):
                if bool(ro.passed[i, g]):
                    idx.append((i, g))
                    held.append(h)
                    comps.append(ro.texts[i * G + g])
        if not n:
            return {}
        both = sum(v.passed for v in judge(held, comps)) if held else 0
        train = len(idx) / n
        return {"verifier/train_tests_pass": train, "verifier/heldout_tests_pass": both / n,
                "verifier/overfit_frac": train - both / n}
