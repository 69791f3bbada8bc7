"""What a health status does (``health.actions`` in the recipe), each action logged with its reason.

Knobs are the stage settings an action may change: ``entropy_coef``, ``temperature``, ``beta``,
``group_size``, ``dynamic_sampling`` (RL stages; :func:`rl_knobs` reads them from the stage — a multi-turn
stage has no ``dynamic_sampling``: the closed loop trains on every group) and ``entropy_target`` (the entropy
floor). An action whose knob the stage lacks is logged as "alert only", never as done. They live in the monitor (``HealthMonitor.knobs``, saved in every
checkpoint); the trainer applies them at the start of each step (:func:`apply_knobs`), so an action taken
after step k acts from step k + 1 — in a resumed run too.
"""

from __future__ import annotations

from rlvr.monitoring.health import Alert, HealthMonitor, ema_series

KNOB_OF = {"entropy_bonus": "entropy_coef", "entropy_floor": "entropy_coef", "raise_temperature": "temperature",
           "adaptive_beta": "beta", "grow_group": "group_size", "dynamic_sampling": "dynamic_sampling"}


def rl_knobs(stage) -> dict:
    """The knobs of an RL stage at its configured values (those its rollout path reads)."""
    knobs = {"entropy_coef": stage.entropy_coef, "temperature": stage.sampling.temperature, "beta": stage.kl.beta,
             "group_size": stage.sampling.group_size}
    if not stage.rollout.closed_loop:
        knobs["dynamic_sampling"] = stage.sampling.dynamic_sampling
    return knobs


def apply_knobs(stage, knobs: dict):
    """``stage`` with the monitor's current knob values (the same object when nothing changed). Only the
    stage's own knobs (:func:`rl_knobs`) are applied: ``model_copy`` skips the config's validators, so a knob
    the stage's path cannot honour (e.g. dynamic sampling in a multi-turn stage) must never reach it."""
    own = rl_knobs(stage)
    knobs = {k: v for k, v in knobs.items() if k in own}
    upd, samp = {}, {}
    if "entropy_coef" in knobs and knobs["entropy_coef"] != stage.entropy_coef:
        upd["entropy_coef"] = knobs["entropy_coef"]
    for k in ("temperature", "group_size", "dynamic_sampling"):
        if k in knobs and knobs[k] != getattr(stage.sampling, k):
            samp[k] = knobs[k]
    if samp:
        upd["sampling"] = stage.sampling.model_copy(update=samp)
    if "beta" in knobs and knobs["beta"] != stage.kl.beta:
        upd["kl"] = stage.kl.model_copy(update={"beta": knobs["beta"]})
    return stage.model_copy(update=upd) if upd else stage


def knob_metrics(mon: HealthMonitor, base: dict) -> dict:
    """``health/<knob>`` for every knob an action has moved from its configured value."""
    return {f"health/{k}": v for k, v in mon.knobs.items() if k in base and v != base[k]}


def take_actions(mon: HealthMonitor, alerts: list[Alert], step: int) -> list[str]:
    """Fire the configured actions of this step's alerts (each at most once per ``cooldown`` steps while its
    status persists) and adapt the entropy floor; returns one ``"action: reason -> effect"`` line each."""
    cfg, done = mon.cfg, []
    for a in alerts:
        for action in getattr(cfg.actions, a.rule):
            if action == "alert":
                continue
            key = f"{a.rule}:{action}"
            last = mon.fired.get(key)
            if last is not None and step - last < cfg.cooldown:
                continue
            mon.fired[key] = step
            done.append(f"{action}: {a.label} ({a.message}) -> {_do(mon, action)}")
    _floor_step(mon)
    return done


def _do(mon: HealthMonitor, action: str) -> str:
    cfg, k = mon.cfg, mon.knobs
    if action == "stop":
        mon.stopped = True
        last = mon.last_healthy_step
        return f"stop the stage, ship the last healthy checkpoint (step {last})" if last is not None else \
            "stop the stage (no healthy checkpoint was saved: ship the current model)"
    knob = KNOB_OF[action]
    if knob not in mon.supports:
        return f"alert only ({knob} is not a knob of this stage)"
    if action == "entropy_bonus":
        k["entropy_coef"] = min(cfg.entropy_bonus_max, k["entropy_coef"] + cfg.entropy_bonus_step)
        return f"entropy_coef {k['entropy_coef']:g}"
    if action == "entropy_floor":
        vals = mon.entropy_values()
        k["entropy_target"] = cfg.entropy_trend_frac * mon._start(vals) if len(vals) >= cfg.window else 0.0
        k["entropy_coef"] = max(k["entropy_coef"], cfg.entropy_bonus_step)
        return f"entropy floor {k['entropy_target']:.4f} (entropy_coef {k['entropy_coef']:g}, adapted each step)"
    if action == "raise_temperature":
        k["temperature"] = round(min(cfg.temperature_max, k["temperature"] + cfg.temperature_step), 6)
        return f"temperature {k['temperature']:g}"
    if action == "adaptive_beta":
        k["beta"] = min(cfg.beta_max, k["beta"] * cfg.beta_factor if k["beta"] > 0 else cfg.beta_start)
        return f"beta {k['beta']:g}"
    if action == "grow_group":
        k["group_size"] = min(cfg.group_size_max, k["group_size"] * 2)
        return f"group_size {k['group_size']}"
    k["dynamic_sampling"] = "correct"
    return "dynamic sampling on correctness"


def _floor_step(mon: HealthMonitor) -> None:
    """Adaptive entropy control under a floor: the coefficient rises by ``entropy_bonus_step`` while the smoothed
    entropy is under the target and falls by it (to 0) while above."""
    target = mon.knobs.get("entropy_target")
    if not target:
        return
    s = ema_series(mon.entropy_values(), mon.cfg.window)
    if not s:
        return
    step = mon.cfg.entropy_bonus_step if s[-1] < target else -mon.cfg.entropy_bonus_step
    mon.knobs["entropy_coef"] = round(min(mon.cfg.entropy_bonus_max, max(0.0, mon.knobs["entropy_coef"] + step)), 8)
