"""Health rules fire on the failure they name and stay quiet on a healthy run."""

import math

import pytest

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
    # every group dead: nothing trains, flagged on the first window, naming the cause
    recs = [{**healthy(i), "rollout/zero_var_frac": 1.0, "rollout/pass_rate": 0.99} for i in range(3)]
    _, alerts = feed(HealthMonitor(HealthConfig(window=3)), recs)[-1]
    assert alerts and alerts[0].rule == "not_training" and "too easy" in alerts[0].message
    # most groups dead on a run that does not improve: dead groups, too easy
    recs = [{**healthy(i), "rollout/zero_var_frac": 0.8, "rollout/pass_rate": 0.9} for i in range(8)]
    _, alerts = feed(HealthMonitor(HealthConfig(window=3, stall_steps=4)), recs)[-1]
    assert [a.rule for a in alerts] == ["stalled", "dead_groups"] and "too easy" in alerts[1].message


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


# ------------------------------------------------------------------ statuses over a smoothed history


def test_low_entropy_on_a_solved_training_set_is_convergence_not_collapse():
    """With solved_pass_rate 0.95, the same entropy fall at a 0.98 training pass rate raises nothing
    (bench/entropy_floor.py's floor runs were flagged ENTROPY COLLAPSE once they had solved their task); at
    0.5 it is a collapse; by default (1.0) there is no exemption."""
    def run(rate, **cfg):
        mon = HealthMonitor(HealthConfig(window=3, **cfg))
        recs = [{**healthy(i), "rollout/pass_rate": rate} for i in range(3)] + \
            [{**healthy(i), "policy/entropy": 0.01, "rollout/pass_rate": rate} for i in range(3, 9)]
        return feed(mon, recs)[-1][0]

    assert run(0.98, solved_pass_rate=0.95)["health/status"] == "healthy"
    assert run(0.5, solved_pass_rate=0.95)["health/status"] == "ENTROPY COLLAPSE"
    assert run(0.98)["health/status"] == "ENTROPY COLLAPSE"


def seed_run(steps=40):
    """The seeds' entropy-collapse panel as a 40-step run: entropy 1.83 -> 0.11, KL 0.04 -> 0.44
    (accelerating at the end), pass rate 0.42 -> 0.79 then flat (seeds/000_*, the table the rules'
    defaults come from: 1.02 'entropy trending down', 0.48 'ENTROPY COLLAPSE', 'stalled + KL drifting')."""
    import numpy as np

    ent = np.interp(range(steps), [0, 8, 16, 24, 32, 39], [1.83, 1.83, 1.51, 1.02, 0.48, 0.11])
    kl = np.interp(range(steps), [0, 8, 16, 24, 32, 39], [0.04, 0.04, 0.11, 0.19, 0.28, 0.56])
    rate = np.interp(range(steps), [0, 16, 24, 28, 39], [0.42, 0.61, 0.73, 0.79, 0.79])
    return [{**healthy(i), "policy/entropy": float(e), "kl/ref": float(k), "rollout/pass_rate": float(p),
             "rollout/zero_var_frac": 0.2} for i, (e, k, p) in enumerate(zip(ent, kl, rate))]


def test_the_seed_table_reads_healthy_then_trending_then_collapse_then_stalled_and_drifting():
    mon = HealthMonitor(HealthConfig(window=4, stall_steps=8))
    statuses = [m["health/status"] for m, _ in feed(mon, seed_run())]
    assert statuses[:12] == ["healthy"] * 12
    first = {s: statuses.index(s) for s in ("entropy trending down", "ENTROPY COLLAPSE")}
    assert 18 <= first["entropy trending down"] < first["ENTROPY COLLAPSE"] <= 34, statuses  # EMA lag: a step or two
    assert "stalled" in statuses[-1] and "KL drifting" in statuses[-1] and "ENTROPY COLLAPSE" in statuses[-1]
    assert all(s != "stalled" for s in statuses[:30])   # the pass rate was still rising


def test_one_noisy_step_does_not_flip_the_status():
    recs = [healthy(i) for i in range(20)]
    # EMA with window 5 (α = 1/3): the spike moves entropy 0.5 -> 0.34 (68% of its start: not trending) and
    # the zero-variance fraction 0.3 -> 0.47 (under dead_frac 0.5)
    recs[12] = {**recs[12], "policy/entropy": 0.01, "rollout/zero_var_frac": 0.8}
    res = feed(HealthMonitor(HealthConfig(window=5, stall_steps=50)), recs)
    assert [m["health/status"] for m, _ in res] == ["healthy"] * 20


def test_kl_accelerating_under_the_ceiling_is_drifting_steady_growth_is_not():
    steady = [{**healthy(i), "kl/ref": 0.01 * i} for i in range(40)]          # linear: +0.05 a window
    accel = [{**healthy(i), "kl/ref": 0.01 * math.exp(0.12 * i)} for i in range(40)]  # each window adds 1.8x more
    cfg = HealthConfig(window=5)
    assert all("KL" not in m["health/status"] for m, _ in feed(HealthMonitor(cfg), steady))
    res = feed(HealthMonitor(cfg), accel)
    first = next(i for i, (m, _) in enumerate(res) if "KL drifting" in m["health/status"])
    assert accel[first]["kl/ref"] < cfg.kl_max and "accelerating" in res[first][1][0].message


def test_length_blowup_and_reward_length_correlation():
    recs = [{**healthy(i), "rollout/length_mean": 10.0 + (i > 10) * 0.8 * (i - 10), "rollout/truncation_rate": 0.0,
             "rollout/reward_length_corr": 0.8} for i in range(30)]
    last, alerts = feed(HealthMonitor(HealthConfig(window=5, stall_steps=100)), recs)[-1]
    assert {a.rule for a in alerts} == {"length_blowup", "reward_length_corr"}
    assert last["health/status"] == "length blow-up + reward-length correlation"
    # a truncation rate that was always 100% (an untrained model that never stops) is not a blow-up
    flat = [{**healthy(i), "rollout/truncation_rate": 1.0} for i in range(30)]
    assert all(not a for _, a in feed(HealthMonitor(HealthConfig(window=5, stall_steps=100)), flat))


# ------------------------------------------------------------------------------------------ actions


def collapse(mon, n=12, start=6):
    from rlvr.monitoring.health_actions import take_actions

    out = []
    for i in range(n):
        m, alerts = mon.observe({**healthy(i), "policy/entropy": 0.5 if i < start else 0.01})
        out.append((m, take_actions(mon, alerts, i + 1)))
    return out


def knobbed(actions: dict, **cfg):
    from rlvr.config.health import HealthActions

    knobs = {"entropy_coef": 0.0, "temperature": 1.0, "beta": 0.0, "group_size": 8, "dynamic_sampling": "off"}
    return HealthMonitor(HealthConfig(window=3, actions=HealthActions(**actions), **cfg), knobs=dict(knobs),
                         supports=frozenset(knobs))


def test_each_action_moves_its_knob_once_per_cooldown_and_says_why():
    mon = knobbed({"entropy_collapse": ["raise_temperature", "entropy_bonus"]}, cooldown=3, temperature_step=0.25,
                  temperature_max=3.0)
    fired = [(i, a) for i, (_, acts) in enumerate(collapse(mon, n=14)) for a in acts]
    steps = sorted({i for i, _ in fired})
    assert steps[1] - steps[0] == 3 and len(steps) >= 2           # cooldown between repeated firings
    assert mon.knobs["temperature"] == 1.0 + 0.25 * len(steps) and mon.knobs["entropy_coef"] == 0.01 * len(steps)
    assert fired[0][1].startswith("raise_temperature: ENTROPY COLLAPSE (token entropy") and "-> temperature 1.25" in fired[0][1]


def test_adaptive_beta_starts_beta_then_doubles_and_dead_groups_grow_g_or_sample_dynamically():
    from rlvr.monitoring.health_actions import take_actions

    # dead groups on a stalled run (the pass rate flat over stall_steps 3: known from step 4 on)
    mon = knobbed({"kl_drift": ["adaptive_beta"], "dead_groups": ["grow_group", "dynamic_sampling"]}, cooldown=1,
                  stall_steps=3)
    for i in range(5):
        m, alerts = mon.observe({**healthy(i), "kl/ref": 1.0, "rollout/zero_var_frac": 0.9})
        take_actions(mon, alerts, i + 1)
    assert mon.knobs["beta"] == pytest.approx(0.02 * 2 ** 4) and mon.knobs["dynamic_sampling"] == "correct"
    assert mon.knobs["group_size"] == 32  # 8 -> 16 -> 32 (group_size_max) at steps 4 and 5


def test_a_knob_the_stage_lacks_is_an_alert_saying_so_and_stop_stops():
    from rlvr.config.health import HealthActions

    mon = HealthMonitor(HealthConfig(window=3, actions=HealthActions(entropy_collapse=["raise_temperature", "stop"])))
    acts = [a for _, acts in collapse(mon) for a in acts]
    assert "alert only (temperature is not a knob of this stage)" in acts[0]
    assert "stop the stage" in acts[1] and mon.should_stop([])


def test_entropy_floor_raises_the_coefficient_under_the_target_and_lowers_it_above():
    from rlvr.monitoring.health_actions import take_actions

    mon = knobbed({"entropy_collapse": ["entropy_floor"]}, entropy_bonus_step=0.01)
    collapse(mon, n=10)
    assert mon.knobs["entropy_target"] == pytest.approx(0.6 * 0.5)   # entropy_trend_frac x the starting entropy
    high = mon.knobs["entropy_coef"]
    assert high > 0.01
    for i in range(10, 20):  # the entropy recovers above the floor: the bonus winds down to 0
        m, alerts = mon.observe({**healthy(i), "policy/entropy": 0.5})
        take_actions(mon, alerts, i + 1)
    assert mon.knobs["entropy_coef"] == 0.0


def test_knobs_and_cooldowns_travel_in_the_state_dict():
    mon = knobbed({"entropy_collapse": ["raise_temperature"]})
    collapse(mon)
    fresh = knobbed({"entropy_collapse": ["raise_temperature"]})
    fresh.load_state_dict(mon.state_dict())
    assert fresh.knobs == mon.knobs and fresh.fired == mon.fired and fresh.status == mon.status


def test_kl_rules_read_the_per_token_kl_when_a_stage_logs_both():
    # PPO: kl/ref is the per-sequence sum (4 nats over 40 tokens), kl/ref_per_token its mean (0.1): no drift
    res = feed(HealthMonitor(HealthConfig(window=3)), [{**healthy(i), "kl/ref": 4.0, "kl/ref_per_token": 0.1}
                                                        for i in range(10)])
    assert all(m["health/status"] == "healthy" for m, _ in res)


def run_with_heldout(recs, heldout, cfg=None, n=None):
    """Feed ``recs`` (step i + 1 is recs[i]) with held-out pass@1 ``heldout[step]`` (on ``n`` problems) at step 0
    (before any update, as the trainer reports it) and at the steps listed; returns the statuses."""
    mon = HealthMonitor(cfg or HealthConfig())
    if 0 in heldout:
        mon.observe_heldout(0, heldout[0], n)
    ev = {s: {"eval/pass_at_1": v, **({"eval/tasks": n} if n else {})} for s, v in heldout.items()}
    return [mon.observe({**r, **ev.get(i + 1, {})})[0]["health/status"] for i, r in enumerate(recs)]


def test_a_run_whose_remaining_groups_still_improve_held_out_is_not_stalled_or_dead():
    """The quickstart's GRPO stage: 55-65% of groups dead (add2 always passes, mul31 is bimodal), the training pass
    rate flat around 0.65, while held-out pass@1 rises 81.5 -> 86.0 (with a dip) over 160 steps."""
    recs = [{**healthy(i), "rollout/zero_var_frac": 0.55 + 0.1 * ((i * 7) % 10) / 10,
             "rollout/pass_rate": 0.65 + 0.03 * (((i * 3) % 5) - 2) / 2, "rollout/entropy": 0.05,
             "kl/ref": 0.01} for i in range(160)]
    heldout = {0: 0.815, 25: 0.825, 50: 0.82, 75: 0.835, 100: 0.84, 125: 0.855, 150: 0.86, 160: 0.86}
    assert set(run_with_heldout(recs, heldout)) == {"healthy"}
    # held-out 2 points under its start on 400 problems is inside the noise of two evaluations (2.8 points)
    assert set(run_with_heldout(recs, {**heldout, 25: 0.795, 50: 0.80, 75: 0.81}, n=400)) == {"healthy"}
    # the same run whose held-out does not move has dead groups (from its second evaluation) and is stalled;
    # so has one whose held-out falls beyond its noise
    flat = run_with_heldout(recs, {k: 0.815 for k in heldout})
    assert set(flat[:24]) == {"healthy"} and flat[-1] == "stalled + dead groups", flat  # from the 2nd evaluation
    falling = run_with_heldout(recs, {k: 0.815 - 0.3 * k / 160 for k in heldout}, n=400)
    assert falling[-1] == "stalled + dead groups", falling


def test_entropy_that_falls_into_right_answers_is_convergence_while_held_out_rises():
    """The agent recipe: entropy 0.30 -> 0.02 while the pass rate rises 0.6 -> 0.99 and held-out 62% -> 99.8%:
    converging on one right answer per task, not a collapse. The same entropy fall with held-out stuck (or
    without held-out evaluations: the seeds' definition) is still ENTROPY COLLAPSE."""
    recs = [{**healthy(i), "rollout/entropy": 0.3 * math.exp(-i / 12) + 0.01, "rollout/pass_rate": 0.99 - 0.39 * math.exp(-i / 8),
             "rollout/zero_var_frac": min(0.95, 0.5 + i / 60)} for i in range(40)]
    rising = {0: 0.62, 10: 0.90, 20: 0.97, 30: 0.99, 40: 0.998}
    assert set(run_with_heldout(recs, rising)) == {"healthy"}
    stuck = run_with_heldout(recs, {0: 0.62, 10: 0.70, 20: 0.66, 30: 0.66, 40: 0.65})
    assert "ENTROPY COLLAPSE" in stuck[-1]
    assert "ENTROPY COLLAPSE" in run_with_heldout(recs, {})[-1]


# ------------------------------------------------------------------------------ preference stages


def preference_run(losses, evals: dict, **cfg):
    """Feed a preference stage's rows: ``losses[i]`` at step i, held-out metrics ``evals[i]`` where given."""
    mon, statuses = HealthMonitor(HealthConfig(window=3, **cfg)), []
    for i, loss in enumerate(losses):
        m, _ = mon.observe({"train/loss": loss, "train/grad_norm": 1.0, "train/sequences": 8, **evals.get(i, {})})
        statuses.append(m["health/status"])
    return statuses


def held(acc, logp_acc):
    return {"heldout/accuracy": acc, "heldout/logp_accuracy": logp_acc, "heldout/pairs": 200}


def test_loss_falling_while_the_policy_comes_to_prefer_the_rejected_answer_is_flagged():
    falling = [0.69 - 0.04 * i for i in range(12)]
    # implicit-reward accuracy keeps rising (DPO's own objective is met) while the policy's own preference
    # logp chosen > logp rejected falls 0.80 -> 0.55: the article's pathological convergence
    st = preference_run(falling, {3: held(0.70, 0.80), 7: held(0.85, 0.75), 11: held(0.95, 0.55)})
    assert st[:11] == ["healthy"] * 11 and st[11] == "PREFERENCE FALLING", st
    # the implicit-reward accuracy falling from its best (0.9 at step 7) while the loss falls: also flagged
    st = preference_run(falling, {3: held(0.80, 0.8), 7: held(0.90, 0.8), 11: held(0.75, 0.8)})
    assert st[11] == "PREFERENCE FALLING"


def test_no_preference_alarm_when_accuracy_holds_or_the_loss_rises_with_it_or_the_drop_is_within_the_gap():
    falling = [0.69 - 0.04 * i for i in range(12)]
    rising = [0.3 + 0.04 * i for i in range(12)]
    assert set(preference_run(falling, {3: held(0.7, 0.7), 7: held(0.8, 0.75), 11: held(0.85, 0.8)})) == {"healthy"}
    assert set(preference_run(rising, {3: held(0.9, 0.9), 11: held(0.6, 0.6)})) == {"healthy"}
    assert set(preference_run(falling, {3: held(0.9, 0.9), 11: held(0.82, 0.82)})) == {"healthy"}
    assert preference_run(falling, {3: held(0.9, 0.9), 11: held(0.82, 0.82)}, pref_accuracy_drop=0.05)[11] \
        == "PREFERENCE FALLING"
