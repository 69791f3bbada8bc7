"""Training health: statuses from rules over the smoothed metric history, and the actions they take.

Each rule reads the per-step metric records of a stage (every stage with a policy: RL, PPO, preference)
through an EMA (α = 2 / (window + 1), see :class:`HealthConfig`), so one noisy step does not flip a status,
and returns an :class:`Alert` or nothing. The step's status is the labels of its alerts joined by " + "
(``"healthy"`` when there are none): ``health/status`` holds it as a string and ``health/code`` as a number
(0 healthy, 1 warn, 2 critical) for numeric sinks; ``health/<rule>`` is 1 for each rule that fired.

Rules (thresholds and where their defaults come from: :mod:`rlvr.config.health`):
  not_training           every step of the last window trained on nothing: no sequence updated, or every
                         group's rewards equal (zero-variance fraction 1: no policy-gradient signal) (critical;
                         fires on the first window)
  entropy_trending_down  smoothed token entropy < ``entropy_trend_frac`` × its first-window mean, still falling
  entropy_collapse       smoothed token entropy < ``entropy_collapse_frac`` × its first-window mean (critical)
                         Both entropy rules are quiet while the stage's held-out pass@1 says the entropy goes
                         into right answers (``heldout_converging``: still climbing, or solved at
                         ``heldout_solved``): a task with one right answer leaves a converged policy no entropy
                         to keep, and the seeds' collapse is the one that plateaus the pass rate below where it
                         could go; and while the training pass rate is >= ``solved_pass_rate``.
  stalled                smoothed pass rate moved < ``stall_delta`` over ``stall_steps`` steps, and the held-out
                         pass@1 (when evaluated twice or more) is not above its first evaluation
  kl_drift               smoothed per-token KL to the reference > ``kl_max``, or > ``kl_accel_min`` and
                         accelerating (``kl/ref_per_token`` when the stage logs it, else ``kl/ref``)
  dead_groups            smoothed zero-variance group fraction >= ``dead_frac`` while the run shows no progress:
                         held-out pass@1 not above its first evaluation (or, before a second evaluation, the
                         smoothed pass rate not risen by ``stall_delta`` over ``stall_steps``). A run whose
                         remaining informative groups still improve it wastes rollouts but is learning.
  verifier_overfit       train pass rate up while held-out pass@1 down, by ``overfit_gap``; or (code and SQL
                         tasks with held-out checks) the share of samples passing the training checks and
                         failing the held-out ones up by ``overfit_gap``; or (math tasks from a generator) the
                         gap between the training problems' pass rate and their regenerated twins' up by
                         ``overfit_gap`` (critical)
  preference_drop        (preference stages) the smoothed training loss fell while a held-out preference accuracy
                         fell by ``pref_accuracy_drop`` from its best earlier evaluation: the implicit-reward
                         accuracy, or the policy's own preference (logp chosen > logp rejected) — DPO's
                         pathological convergence, the loss falling while the model comes to prefer the
                         rejected answer (critical)
  length_blowup          smoothed truncation rate > ``trunc_max`` and risen by half of it, or mean length
                         > ``length_rise`` × start
  reward_length_corr     smoothed reward/length correlation > ``length_corr_max`` while lengths grew
  nan                    a loss or gradient norm is NaN/inf (critical)
  tool_collapse          (multi-turn) tool calls fell while the pass rate stalled
  env_leak               (multi-turn) a secret goal value appeared in an observation (critical)

Actions (:mod:`rlvr.monitoring.health_actions`) change the stage's knobs — entropy coefficient, sampling
temperature, β, G, dynamic sampling — or stop it; the knobs and the history are the monitor's state, saved
in every checkpoint, so a resumed run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlvr.config.health import HealthConfig

LEVEL = {"ok": 0, "warn": 1, "critical": 2}
LABEL = {"nan": "NaN", "not_training": "NOT TRAINING", "entropy_collapse": "ENTROPY COLLAPSE",
         "verifier_overfit": "VERIFIER OVERFIT",
         "env_leak": "ENV LEAK", "entropy_trending_down": "entropy trending down", "stalled": "stalled",
         "preference_drop": "PREFERENCE FALLING",
         "kl_drift": "KL drifting", "dead_groups": "dead groups", "length_blowup": "length blow-up",
         "reward_length_corr": "reward-length correlation", "tool_collapse": "tool collapse"}
RULES = tuple(LABEL)


@dataclass
class Alert:
    rule: str
    level: str
    message: str

    @property
    def label(self) -> str:
        return LABEL[self.rule]


def ema_series(vals: list[float], window: int) -> list[float]:
    """The EMA of ``vals`` at every position (α = 2 / (window + 1)), seeded with the first value."""
    a, out = 2.0 / (window + 1), []
    for v in vals:
        out.append(v if not out else a * v + (1 - a) * out[-1])
    return out


def status_of(alerts: list[Alert]) -> tuple[str, int]:
    """``("healthy", 0)`` or the alerts' labels (critical first) joined by " + " and the highest level."""
    if not alerts:
        return "healthy", 0
    alerts = sorted(alerts, key=lambda a: (-LEVEL[a.level], RULES.index(a.rule)))
    return " + ".join(a.label for a in alerts), max(LEVEL[a.level] for a in alerts)


@dataclass
class HealthMonitor:
    cfg: HealthConfig = field(default_factory=HealthConfig)
    history: list[dict] = field(default_factory=list)
    evals: list[tuple[float, float]] = field(default_factory=list)  # (train pass rate, held-out pass@1)
    heldout: list[tuple] = field(default_factory=list)  # (step, held-out pass@1, problems or None), step 0 included
    knobs: dict = field(default_factory=dict)        # the stage's current knob values (health_actions)
    supports: frozenset = frozenset()                # the knobs this stage has
    fired: dict = field(default_factory=dict)        # "rule:action" -> step it last fired
    status: str = "healthy"
    last_healthy_step: int | None = None
    stopped: bool = False

    KEYS = ("train/loss", "train/grad_norm", "train/sequences", "policy/entropy", "kl/ref", "kl/ref_per_token",
            "rollout/zero_var_frac", "rollout/pass_rate", "eval/pass_at_1", "agent/tool_calls_mean",
            "rollout/length_mean", "rollout/truncation_rate", "rollout/reward_length_corr",
            "verifier/overfit_frac", "rollout/entropy", "verifier/twin_gap", "verifier/twin_pass",
            "verifier/twin_tasks", "heldout/accuracy", "heldout/logp_accuracy")

    def observe(self, rec: dict) -> tuple[dict, list[Alert]]:
        """Add one step's metrics; return the ``health/*`` metrics and the alerts raised at this step."""
        self.history.append({k: rec[k] for k in self.KEYS if k in rec})
        if "eval/pass_at_1" in rec:
            self.evals.append((self._smoothed("rollout/pass_rate"), rec["eval/pass_at_1"]))
            self.observe_heldout(len(self.history), rec["eval/pass_at_1"], rec.get("eval/tasks"))
        rules = (self._nan(rec), self._not_training(), self._entropy_collapse(), self._entropy_trend(),
                 self._stalled(), self._kl(),
                 self._dead(), self._overfit(), self._preference(), self._length(), self._length_corr(), self._tool_collapse(),
                 self._leak(rec))
        alerts = [a for a in rules if a]
        self.status, code = status_of(alerts)
        out = {"health/status": self.status, "health/code": code}
        for a in alerts:
            out[f"health/{a.rule}"] = 1
        return out, alerts

    def observe_heldout(self, step: int, pass_at_1: float, n: int | None = None) -> None:
        """A held-out evaluation of the stage's policy on ``n`` problems (the step-0 one, before any update,
        included)."""
        if isinstance(pass_at_1, (int, float)) and math.isfinite(pass_at_1):
            self.heldout.append((step, float(pass_at_1), int(n) if n else None))

    def state_dict(self) -> dict:
        """What the rules and actions read, for the checkpoint: a resumed run keeps its trends and knobs."""
        return {"history": [{k: r[k] for k in self.KEYS if k in r} for r in self.history],
                "evals": list(self.evals), "heldout": list(self.heldout), "knobs": dict(self.knobs),
                "fired": dict(self.fired),
                "status": self.status, "last_healthy_step": self.last_healthy_step}

    def load_state_dict(self, state: dict) -> None:
        self.history = [dict(r) for r in state.get("history", [])]
        self.evals = [tuple(e) for e in state.get("evals", [])]
        self.heldout = [tuple(e) for e in state.get("heldout", [])]
        self.knobs.update(state.get("knobs", {}))
        self.fired = dict(state.get("fired", {}))
        self.status = state.get("status", "healthy")
        self.last_healthy_step = state.get("last_healthy_step")

    def should_stop(self, alerts: list[Alert]) -> bool:
        return self.stopped or (self.cfg.stop_on_critical and any(a.level == "critical" for a in alerts))

    # ------------------------------------------------------------------------------------ series

    def _values(self, key: str, updated_only: bool = False) -> list[float]:
        return [float(r[key]) for r in self.history if isinstance(r.get(key), (int, float))
                and math.isfinite(r[key]) and (not updated_only or r.get("train/sequences", 1))]

    def _ema(self, key: str, updated_only: bool = False) -> list[float]:
        return ema_series(self._values(key, updated_only), self.cfg.window)

    def _smoothed(self, key: str) -> float:
        s = self._ema(key)
        return s[-1] if s else float("nan")

    def _start(self, vals: list[float]) -> float:
        w = self.cfg.window
        return sum(vals[:w]) / w

    # ---------------------------------------------------------------------------------- progress

    def heldout_gain(self) -> float | None:
        """How far held-out pass@1 is above the stage's first evaluation: the larger of the latest figure's
        gain and the mean gain of the evaluations since the first (one dip between two evaluations is the
        noise of a policy still moving, not a loss). None before a second evaluation."""
        if len(self.heldout) < 2:
            return None
        first, later = self.heldout[0][1], [e[1] for e in self.heldout[1:]]
        return max(later[-1], sum(later) / len(later)) - first

    def heldout_noise(self) -> float:
        """The standard error of the difference between the first and the latest held-out figures, as if
        independent (binomial, ``sqrt(p1 q1 / n + p2 q2 / n)``; the paired difference on the same problems is
        smaller, so this errs towards no alarm); 0 when the evaluations' sizes are unknown."""
        (_, p1, n1), (_, p2, n2) = self.heldout[0], self.heldout[-1]
        return math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2) if n1 and n2 else 0.0

    def heldout_converging(self) -> bool:
        """Held-out pass@1 says a falling entropy goes into right answers: its latest evaluation is above the
        first and either the best so far (still climbing), or the task is solved on held-out problems (the
        best at or above ``heldout_solved`` and the latest within ``stall_delta`` of it: no headroom left for a
        collapse to cost). A plateau below ``heldout_solved`` is neither: the seeds' collapse."""
        if len(self.heldout) < 2:
            return False
        vals = [e[1] for e in self.heldout]
        best = max(vals[:-1])
        if vals[-1] <= vals[0]:
            return False
        return vals[-1] >= best or (max(best, vals[-1]) >= self.cfg.heldout_solved
                                    and vals[-1] >= best - self.cfg.stall_delta)

    def progressing(self) -> bool | None:
        """Whether the run is learning. With two held-out evaluations or more: False when held-out pass@1 is
        not above its first evaluation by more than its noise allows the other way (``heldout_gain`` <=
        -``heldout_noise``: below its start, or exactly at it when the sizes are unknown), else True. Before
        that, the smoothed training pass rate risen by ``stall_delta`` over ``stall_steps`` steps; None while
        neither can be told (fewer than ``stall_steps`` steps and one evaluation)."""
        gain = self.heldout_gain()
        if gain is not None:
            return gain > -self.heldout_noise() if self.heldout_noise() else gain > 0
        s, n = self._ema("rollout/pass_rate"), self.cfg.stall_steps
        if len(s) <= max(n, self.cfg.window):
            return None
        return s[-1] - s[-1 - n] >= self.cfg.stall_delta

    # ------------------------------------------------------------------------------------- rules

    def _nan(self, rec: dict) -> Alert | None:
        for k in ("train/loss", "train/grad_norm"):
            v = rec.get(k)
            if isinstance(v, float) and not math.isfinite(v):
                return Alert("nan", "critical", f"{k} is {v}")
        return None

    def _not_training(self) -> Alert | None:
        """The last window's steps all trained on nothing (from the first window on)."""
        w = self.cfg.window
        if len(self.history) < w:
            return None
        recent = self.history[-w:]
        idle = [r.get("train/sequences", 1) == 0 or r.get("rollout/zero_var_frac", 0.0) >= 1.0 for r in recent]
        if not all(idle):
            return None
        rates = [r["rollout/pass_rate"] for r in recent if isinstance(r.get("rollout/pass_rate"), (int, float))]
        rate = sum(rates) / len(rates) if rates else float("nan")
        why = ("every group all pass: the data is too easy for this policy" if rate >= 0.5 else
               "every group all fail: the data is too hard for this policy, or the reward never pays") \
            if rates else "no group had a reward signal"
        return Alert("not_training", "critical", f"nothing trained in the last {w} steps (zero-variance fraction "
                     f"1.00 or no sequence updated; pass rate {rate:.2f}): {why}; the weights do not move. Change "
                     "the data's difficulty, raise the temperature or G, use dynamic sampling, or check the reward")

    def entropy_values(self) -> list[float]:
        """The entropy the rules read: the sampled tokens' (``rollout/entropy``, every step) when the stage
        logs it, else the trained tokens' (``policy/entropy``; steps without an update are skipped)."""
        vals = self._values("rollout/entropy")
        return vals if vals else self._values("policy/entropy", updated_only=True)

    def _entropy(self) -> tuple[float, list[float]] | None:
        """(starting entropy, smoothed series) once more than a window of it is known; None while held-out
        pass@1 is still rising or the training set is solved (``solved_pass_rate``): a policy whose entropy
        goes into right answers is converging, not collapsing."""
        vals = self.entropy_values()
        if len(vals) <= self.cfg.window or self.heldout_converging():
            return None
        if self.cfg.solved_pass_rate < 1.0 and self._smoothed("rollout/pass_rate") >= self.cfg.solved_pass_rate:
            return None
        return self._start(vals), ema_series(vals, self.cfg.window)

    def _entropy_collapse(self) -> Alert | None:
        e = self._entropy()
        if e is None:
            return None
        start, s = e
        if start > 0 and s[-1] < self.cfg.entropy_collapse_frac * start:
            return Alert("entropy_collapse", "critical",
                         f"token entropy {s[-1]:.4f} is {s[-1] / start:.0%} of its starting {start:.4f}: raise the "
                         "temperature or eps_high (clip-higher), add an entropy bonus or floor, or lower the lr")
        return None

    def _entropy_trend(self) -> Alert | None:
        e = self._entropy()
        if e is None:
            return None
        start, s = e
        lo, hi = self.cfg.entropy_collapse_frac * start, self.cfg.entropy_trend_frac * start
        before = s[max(0, len(s) - 1 - self.cfg.window)]
        if start > 0 and lo <= s[-1] < hi and s[-1] < before:
            return Alert("entropy_trending_down", "warn",
                         f"token entropy {s[-1]:.4f} ({s[-1] / start:.0%} of its starting {start:.4f}) and falling")
        return None

    def _stalled(self) -> Alert | None:
        s, n = self._ema("rollout/pass_rate"), self.cfg.stall_steps
        if len(s) <= max(n, self.cfg.window):
            return None
        gain = self.heldout_gain()
        if abs(s[-1] - s[-1 - n]) < self.cfg.stall_delta and not (gain is not None and self.progressing()):
            held = f"; held-out pass@1 {gain:+.3f} from its first evaluation" if gain is not None else ""
            return Alert("stalled", "warn", f"pass rate flat at {s[-1]:.2f} for {n} steps "
                         f"(moved {s[-1] - s[-1 - n]:+.3f}){held}")
        return None

    def _kl(self) -> Alert | None:
        # per-token KL: PPO logs the per-sequence sum as kl/ref and the per-token mean beside it
        s, w = self._ema("kl/ref_per_token") or self._ema("kl/ref"), self.cfg.window
        if not s:
            return None
        if s[-1] > self.cfg.kl_max:
            return Alert("kl_drift", "warn", f"KL to the reference {s[-1]:.3f} > {self.cfg.kl_max}: raise beta "
                         "(adaptive_beta) or lower the lr")
        if len(s) > 2 * w and s[-1] > self.cfg.kl_accel_min:
            now, before = s[-1] - s[-1 - w], s[-1 - w] - s[-1 - 2 * w]
            if now > 0 and now > self.cfg.kl_accel_ratio * max(before, 0.0):
                return Alert("kl_drift", "warn", f"KL to the reference {s[-1]:.3f} accelerating (+{now:.3f} over "
                             f"the last {w} steps after {before:+.3f}): raise beta (adaptive_beta) or lower the lr")
        return None

    def _dead(self) -> Alert | None:
        s = self._ema("rollout/zero_var_frac")
        if len(s) < self.cfg.window or s[-1] < self.cfg.dead_frac or self.progressing() is not False:
            return None
        rate = self._smoothed("rollout/pass_rate")
        hint = "too easy (all pass)" if rate > 0.5 else "too hard (all fail)"
        gain = self.heldout_gain()
        why = f"held-out pass@1 {gain:+.3f} from its first evaluation" if gain is not None else \
            f"pass rate flat over {self.cfg.stall_steps} steps"
        return Alert("dead_groups", "warn", f"{s[-1]:.0%} of groups have zero reward variance (only {1 - s[-1]:.0%} "
                     f"of the batch trains) and the run is not improving ({why}): the data is {hint}; "
                     "use dynamic sampling, a larger G, a higher temperature or change the curriculum")

    def _overfit(self) -> Alert | None:
        vals = self._values("verifier/overfit_frac")
        if len(vals) > self.cfg.window:
            start, now = self._start(vals), ema_series(vals, self.cfg.window)[-1]
            if now - start >= self.cfg.overfit_gap:
                return Alert("verifier_overfit", "critical", f"{now:.0%} of samples pass the training tests and fail "
                             f"the held-out ones (from {start:.0%}): the policy is fitting the tests it is shown")
        twin = self._twin_gap()
        if twin is not None:
            return twin
        if len(self.evals) < 3:
            return None
        (tr0, ho0), (tr1, ho1) = self.evals[0], self.evals[-1]
        g = self.cfg.overfit_gap
        if tr1 - tr0 >= g and ho0 - ho1 >= g:
            return Alert("verifier_overfit", "critical", f"training pass rate {tr0:.0%} -> {tr1:.0%} while held-out "
                         f"{ho0:.0%} -> {ho1:.0%}: the policy is gaming the verifier or memorising")
        return None

    def _preference(self) -> Alert | None:
        """Held-out preference accuracy down by ``pref_accuracy_drop`` from its best earlier evaluation while the
        smoothed training loss is below its value at that evaluation (DPO's pathological convergence)."""
        a, loss, evals = 2.0 / (self.cfg.window + 1), None, []
        for r in self.history:
            v = r.get("train/loss")
            if isinstance(v, (int, float)) and math.isfinite(v):
                loss = v if loss is None else a * v + (1 - a) * loss
            if isinstance(r.get("heldout/accuracy"), (int, float)) and loss is not None:
                evals.append((loss, r))
        if len(evals) < 2:
            return None
        loss1, last = evals[-1]
        own = "the policy's own preference for the chosen answer (logp chosen > logp rejected)"
        for key, what in (("heldout/logp_accuracy", own), ("heldout/accuracy", "implicit-reward accuracy")):
            earlier = [(r[key], lo) for lo, r in evals[:-1] if isinstance(r.get(key), (int, float))]
            if not earlier or not isinstance(last.get(key), (int, float)):
                continue
            best, loss0 = max(earlier, key=lambda e: e[0])
            if best - last[key] >= self.cfg.pref_accuracy_drop and loss1 < loss0:
                return Alert("preference_drop", "critical", f"training loss {loss0:.3f} -> {loss1:.3f} while held-out "
                             f"{what} fell {best:.0%} -> {last[key]:.0%}: the loss is no longer measuring preference "
                             "(try the constrained_po loss, a larger beta, or stop at the best held-out step)")
        return None

    def _twin_gap(self) -> Alert | None:
        """The math twins' gap (training problems' pass rate minus their regenerated twins') over the last
        ``window`` measurements against the first ``window``: up by ``overfit_gap`` and by two standard errors
        of the twins' pass rates (binomial over the twins sampled in each window: one sample of each of 16
        tasks a measurement leaves a single measurement's gap too noisy to read alone)."""
        rows = [r for r in self.history if isinstance(r.get("verifier/twin_gap"), (int, float))]
        w = self.cfg.window
        if len(rows) <= w:
            return None

        def pooled(rs: list[dict]) -> tuple[float, float]:
            n = sum(r.get("verifier/twin_tasks", 1) for r in rs)
            p = sum(r.get("verifier/twin_pass", 0.0) * r.get("verifier/twin_tasks", 1) for r in rs) / max(n, 1)
            return sum(r["verifier/twin_gap"] for r in rs) / len(rs), p * (1 - p) / max(n, 1)

        (g0, v0), (g1, v1) = pooled(rows[:w]), pooled(rows[-w:])
        if g1 - g0 >= max(self.cfg.overfit_gap, 2 * math.sqrt(v0 + v1)):
            return Alert("verifier_overfit", "critical", f"the training problems pass {g1:+.0%} more often than the "
                         f"same problems with other numbers (from {g0:+.0%}): the policy is memorising its "
                         "training problems")
        return None

    def _length(self) -> Alert | None:
        tv = self._values("rollout/truncation_rate")
        if len(tv) > self.cfg.window:
            start, now = self._start(tv), ema_series(tv, self.cfg.window)[-1]
            if now > max(self.cfg.trunc_max, start + self.cfg.trunc_max / 2):
                return Alert("length_blowup", "warn", f"{now:.0%} of completions hit the generation budget "
                             f"(from {start:.0%})")
        vals = self._values("rollout/length_mean")
        if len(vals) > self.cfg.window:
            start, now = self._start(vals), ema_series(vals, self.cfg.window)[-1]
            if start > 0 and now > self.cfg.length_rise * start:
                return Alert("length_blowup", "warn", f"mean completion length {start:.1f} -> {now:.1f}")
        return None

    def _length_corr(self) -> Alert | None:
        c, vals = self._ema("rollout/reward_length_corr"), self._values("rollout/length_mean")
        if len(c) < self.cfg.window or len(vals) <= self.cfg.window:
            return None
        start, now = self._start(vals), ema_series(vals, self.cfg.window)[-1]
        if c[-1] > self.cfg.length_corr_max and start > 0 and now > self.cfg.length_corr_rise * start:
            return Alert("reward_length_corr", "warn", f"reward/length correlation {c[-1]:.2f} while the mean "
                         f"length grew {start:.1f} -> {now:.1f}: the reward may be paying for length")
        return None

    def _tool_collapse(self) -> Alert | None:
        w = self.cfg.window
        rows = [r for r in self.history if isinstance(r.get("agent/tool_calls_mean"), (int, float))]
        if len(rows) < 2 * w:
            return None

        def mean(rs: list[dict], k: str) -> float:
            return sum(r.get(k, 0.0) for r in rs) / len(rs)

        calls0, calls1 = mean(rows[:w], "agent/tool_calls_mean"), mean(rows[-w:], "agent/tool_calls_mean")
        pass0, pass1 = mean(rows[:w], "rollout/pass_rate"), mean(rows[-w:], "rollout/pass_rate")
        if calls0 > 0 and calls1 < self.cfg.tool_collapse_frac * calls0 and pass1 <= pass0 + 0.02:
            return Alert("tool_collapse", "warn", f"tool calls per trajectory {calls0:.2f} -> {calls1:.2f} while "
                         f"the pass rate stalled ({pass0:.0%} -> {pass1:.0%}): the policy is abandoning its "
                         "tools; check the budget penalty, raise the temperature, or add tool-use demonstrations")
        return None

    def _leak(self, rec: dict) -> Alert | None:
        n = rec.get("agent/leaks", 0)
        if isinstance(n, (int, float)) and n > 0:
            return Alert("env_leak", "critical", f"{int(n)} trajector{'y' if n == 1 else 'ies'} saw a secret goal "
                         "value in an observation (environment bug); they were kept out of the advantages")
        return None
