"""The RL trainer's side of held-out checks for code and SQL tasks (``health.code_tests``, see
:mod:`rlvr.verifiers.heldout_split`): hand the training verifier the training pool (rotated), then run the
completions that passed it on the held-out tests."""

from __future__ import annotations

from rlvr.data.arithmetic import regenerate
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
            out.append(t if not self.cfg.heldout_frac else training_task(t, self.cfg.heldout_frac, self.seed, step, self.cfg.rotate_every,
                                     self.cfg.rotate_frac))
        return out

    def measure(self, ro, judge) -> dict:
        """``verifier/train_tests_pass`` (samples passing the training tests), ``verifier/heldout_tests_pass``
        (... and the held-out ones) and ``verifier/overfit_frac`` (the first minus the second), over the
        samples of tasks whose tests were split."""
        if not self.cfg.heldout_frac:
            return {}
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

    def twin_tasks(self, ro, step: int) -> tuple[list[int], list]:
        """(indices of the step's tasks that a generator can regenerate, their twins with other numbers), on
        the steps ``twin_every`` names; ``([], [])`` otherwise."""
        every = getattr(self.cfg, "twin_every", 0)
        if not every or step % every:
            return [], []
        idx, twins = [], []
        for i, t in enumerate(ro.tasks):
            tw = regenerate(self.orig.get(t.id, t), self.seed)
            if tw is not None:
                idx.append(i)
                twins.append(tw)
        return idx, twins

    @staticmethod
    def twin_metrics(ro, idx: list[int], twin_passed: list[bool]) -> dict:
        """``verifier/twin_train_pass`` (the step's pass rate on the regenerated tasks' own samples),
        ``verifier/twin_pass`` (their twins'), ``verifier/twin_gap`` (the first minus the second) and
        ``verifier/twin_tasks`` (how many twins)."""
        if not idx or not twin_passed:
            return {}
        train = float(ro.passed[idx].float().mean())
        twin = sum(map(bool, twin_passed)) / len(twin_passed)
        return {"verifier/twin_train_pass": train, "verifier/twin_pass": twin, "verifier/twin_gap": train - twin,
                "verifier/twin_tasks": len(twin_passed)}


def heldout_guard(cfg, seed: int) -> TestGuard | None:
    """The guard a single-turn RL stage runs (``cfg``: its ``health.code_tests``): on unless ``heldout_frac``
    and ``twin_every`` are both 0. It splits only code and SQL tasks whose checks can be split (other tasks pass
    through untouched) and regenerates only math tasks a generator made."""
    return TestGuard(cfg, seed) if cfg.heldout_frac or cfg.twin_every else None
