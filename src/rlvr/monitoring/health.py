"""Training-health rules for RL: name the failure while it happens, and say what to do.

Each rule reads the stream of per-step metric records (``rlvr.trainers.rl`` writes them) and returns
an alert or nothing. The monitor turns alerts into ``health/status`` (0 ok, 1 warn, 2 critical) and,
when configured to act, asks the trainer to stop the stage (the best checkpoint so far is kept).

Rules (thresholds in :class:`HealthConfig`):
  entropy_collapse  mean token entropy fell below ``entropy_floor_frac`` × its value over the first
                    ``window`` steps (the policy stopped exploring; GRPO's classic failure)
  kl_drift          KL to the reference above ``kl_max`` (the policy left the trust region)
  dead_groups       zero-variance groups above ``dead_frac`` for ``window`` steps in a row (no signal:
                    the data is too easy or too hard for this policy)
  verifier_overfit  the training pass rate rose by ``overfit_gap`` while held-out pass@1 fell by it
                    (the policy is learning the verifier, not the task)
  nan               a loss or gradient norm is NaN/inf
  tool_collapse     (multi-turn) tool calls per trajectory fell below ``tool_collapse_frac`` × their
                    first-window mean while the pass rate did not rise (the policy stopped using its
                    tools: answering from its head, or ending episodes early)
  env_leak          (multi-turn) a secret goal value appeared in an observation during the rollout
                    (an environment bug: those trajectories are infra, never rewarded)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlvr.config.health import HealthConfig

STATUS = {"ok": 0, "warn": 1, "critical": 2}


@dataclass
class Alert:
    rule: str
    level: str
    message: str


@dataclass
class HealthMonitor:
    cfg: HealthConfig = field(default_factory=HealthConfig)
    history: list[dict] = field(default_factory=list)
    evals: list[tuple[float, float]] = field(default_factory=list)  # (train pass rate, held-out pass@1)

    def observe(self, rec: dict) -> tuple[dict, list[Alert]]:
        """Add one step's metrics; return ``health/*`` metrics and the alerts raised at this step."""
        self.history.append({k: rec[k] for k in self.KEYS if k in rec})
        if "eval/pass_at_1" in rec:
            self.evals.append((self._recent("rollout/pass_rate"), rec["eval/pass_at_1"]))
        alerts = [a for a in (self._nan(rec), self._entropy(), self._kl(rec), self._dead(), self._overfit(),
                              self._tool_collapse(), self._leak(rec)) if a]
        level = max((STATUS[a.level] for a in alerts), default=0)
        out = {"health/status": level}
        for a in alerts:
            out[f"health/{a.rule}"] = 1
        return out, alerts

    KEYS = ("train/loss", "train/grad_norm", "train/sequences", "policy/entropy", "kl/ref",
            "rollout/zero_var_frac", "rollout/pass_rate", "eval/pass_at_1", "agent/tool_calls_mean")

    def state_dict(self) -> dict:
        """The history the rules read (only their keys), for the checkpoint: a resumed run keeps its trends."""
        return {"history": [{k: r[k] for k in self.KEYS if k in r} for r in self.history],
                "evals": list(self.evals)}

    def load_state_dict(self, state: dict) -> None:
        self.history = [dict(r) for r in state.get("history", [])]
        self.evals = [tuple(e) for e in state.get("evals", [])]

    def should_stop(self, alerts: list[Alert]) -> bool:
        return self.cfg.stop_on_critical and any(a.level == "critical" for a in alerts)

    def _recent(self, key: str, n: int | None = None) -> float:
        vals = [r[key] for r in self.history[-(n or self.cfg.window):] if isinstance(r.get(key), (int, float))]
        return sum(vals) / len(vals) if vals else float("nan")

    def _nan(self, rec: dict) -> Alert | None:
        for k in ("train/loss", "train/grad_norm"):
            v = rec.get(k)
            if isinstance(v, float) and not math.isfinite(v):
                return Alert("nan", "critical", f"{k} is {v}")
        return None

    def _entropy(self) -> Alert | None:
        w = self.cfg.window
        ents = [r["policy/entropy"] for r in self.history if r.get("train/sequences", 0) and "policy/entropy" in r]
        if len(ents) < 2 * w:
            return None
        start, now = sum(ents[:w]) / w, sum(ents[-w:]) / w
        if start > 0 and now < self.cfg.entropy_floor_frac * start:
            return Alert("entropy_collapse", "critical",
                         f"token entropy {now:.4f} is {now / start:.0%} of its starting {start:.4f}: raise the "
                         "temperature or eps_high (clip-higher), add an entropy bonus, or lower the lr")
        return None

    def _kl(self, rec: dict) -> Alert | None:
        kl = rec.get("kl/ref")
        if isinstance(kl, (int, float)) and kl > self.cfg.kl_max:
            return Alert("kl_drift", "warn", f"KL to the reference {kl:.3f} > {self.cfg.kl_max}: raise beta or lower the lr")
        return None

    def _dead(self) -> Alert | None:
        w = self.cfg.window
        zv = [r.get("rollout/zero_var_frac") for r in self.history[-w:]]
        if len(zv) == w and all(isinstance(z, (int, float)) and z >= self.cfg.dead_frac for z in zv):
            rate = self._recent("rollout/pass_rate")
            hint = "too easy (all pass)" if rate > 0.5 else "too hard (all fail)"
            return Alert("dead_groups", "warn", f"{self._recent('rollout/zero_var_frac'):.0%} of groups have zero "
                         f"reward variance for {w} steps: the data is {hint}; use DAPO dynamic sampling or "
                         "change the curriculum")
        return None

    def _overfit(self) -> Alert | None:
        if len(self.evals) < 3:
            return None
        (tr0, ho0), (tr1, ho1) = self.evals[0], self.evals[-1]
        g = self.cfg.overfit_gap
        if tr1 - tr0 >= g and ho0 - ho1 >= g:
            return Alert("verifier_overfit", "critical", f"training pass rate {tr0:.0%} -> {tr1:.0%} while held-out "
                         f"pass@1 {ho0:.0%} -> {ho1:.0%}: the policy is gaming the verifier or memorising")
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
