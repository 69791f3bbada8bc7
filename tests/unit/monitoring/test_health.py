"""Health rules fire on the failure they name and stay quiet on a healthy run."""

from rlvr.config.health import HealthConfig
from rlvr.monitoring.health import HealthMonitor


def feed(mon, recs):
    out = []
    for r in recs:
        out.append(mon.observe(r))
    return out


def healthy(i):
    return {"step": i, "policy/entropy": 0.5, "rollout/zero_var_frac": 0.3, "rollout/pass_rate": 0.4,
            "train/sequences": 10, "train/loss": 0.1, "train/grad_norm": 1.0}


def test_healthy_run_is_ok():
    res = feed(HealthMonitor(HealthConfig(window=3)), [healthy(i) for i in range(12)])
    assert all(m["health/status"] == "healthy" and m["health/code"] == 0 and not a for m, a in res)


def test_entropy_collapse_is_critical_and_can_stop():
    mon = HealthMonitor(HealthConfig(window=3, stop_on_critical=True))
    recs = [healthy(i) for i in range(3)] + [{**healthy(i), "policy/entropy": 0.01} for i in range(3, 9)]
    metrics, alerts = feed(mon, recs)[-1]
    assert metrics["health/entropy_collapse"] == 1 and metrics["health/code"] == 2
    assert metrics["health/status"] == "ENTROPY COLLAPSE"
    assert mon.should_stop(alerts)


def test_dead_groups_names_too_easy():
    recs = [{**healthy(i), "rollout/zero_var_frac": 1.0, "rollout/pass_rate": 0.99} for i in range(3)]
    _, alerts = feed(HealthMonitor(HealthConfig(window=3)), recs)[-1]
    assert alerts and alerts[0].rule == "dead_groups" and "too easy" in alerts[0].message


def test_kl_drift_and_nan():
    m, a = HealthMonitor().observe({**healthy(0), "kl/ref": 2.0, "train/loss": float("nan")})
    assert {x.rule for x in a} == {"kl_drift", "nan"} and m["health/code"] == 2
    assert m["health/status"] == "NaN + KL drifting"


def test_verifier_overfitting_train_up_heldout_down():
    mon = HealthMonitor(HealthConfig(window=1))
    for i, (tr, ho) in enumerate([(0.3, 0.5), (0.5, 0.45), (0.7, 0.35)]):
        _, alerts = mon.observe({**healthy(i), "rollout/pass_rate": tr, "eval/pass_at_1": ho})
    assert alerts and alerts[0].rule == "verifier_overfit"


def agent(i, calls, rate):
    return {**healthy(i), "agent/tool_calls_mean": calls, "rollout/pass_rate": rate, "agent/leaks": 0}


def test_tool_use_collapse_warns_when_calls_fall_while_success_stalls():
    # first window: 2.0 calls and 40% pass; last window: 0.6 calls (< 0.5 x 2.0) and still 40%
    mon = HealthMonitor(HealthConfig(window=3))
    metrics, alerts = feed(mon, [agent(i, 2.0, 0.4) for i in range(3)] + [agent(i, 0.6, 0.4) for i in range(3, 6)])[-1]
    assert metrics["health/tool_collapse"] == 1 and alerts[0].level == "warn" and "2.00 -> 0.60" in alerts[0].message
    # fewer calls while success rises is the policy getting efficient, not a collapse
    res = feed(HealthMonitor(HealthConfig(window=3)), [agent(i, 2.0, 0.4) for i in range(3)] +
               [agent(i, 0.6, 0.7) for i in range(3, 6)])
    assert all("health/tool_collapse" not in m for m, _ in res)


def test_a_leak_during_the_rollout_is_a_critical_alert():
    metrics, alerts = HealthMonitor(HealthConfig()).observe({**healthy(0), "agent/leaks": 2})
    assert metrics["health/env_leak"] == 1 and alerts[0].level == "critical" and "2 trajectories" in alerts[0].message
