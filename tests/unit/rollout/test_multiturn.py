"""The closed-loop collector: token-in/token-out, masking, faults, replay agreement, templates."""

import json
import logging
import os
import sys
import time

import pytest
import torch

from rlvr.config.agent import AgentLoopConfig, TrajectoryCredit
from rlvr.config.rl import GRPOLoss, RLStage
from rlvr.envs import generate_calculator_tasks, registry
from rlvr.envs.calculator import compact_call
from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import build_tiny
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.multiturn import MultiTurnCollector, TurnTemplate, demo_example
from rlvr.trainers.agent import assign_turn_rewards, build_agent_batch, turn_advantages
from rlvr.data.collate import pad_batch
from rlvr.trainers.rl import micro_loss

sys.path.insert(0, os.path.dirname(__file__))
from agent_fakes import FAKE_ENVS, ScriptedEngine, echo_task

LOOP = AgentLoopConfig(max_turns=4, max_new_tokens=12, max_total_tokens=400)
SCRIPTED = AgentLoopConfig(max_turns=4, max_new_tokens=64, max_total_tokens=600)


@pytest.fixture(autouse=True)
def fake_envs(monkeypatch):
    for cls in FAKE_ENVS:
        monkeypatch.setitem(registry.ENVIRONMENTS, cls.name, cls)


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny(size="test", seed=3)
    return model.eval(), tok


def echo_rollout(tiny, n_tasks=2, G=3, seed=0):
    model, tok = tiny
    col = MultiTurnCollector(HFEngine(model, tok), tok, LOOP)
    return col.collect([echo_task(i) for i in range(n_tasks)], G, temperature=1.0, seed=seed)


def test_trajectories_are_the_sampled_ids_with_observations_masked(tiny):
    _, tok = tiny
    trajs = echo_rollout(tiny)
    assert len(trajs) == 6 and all(t.valid and t.end == "env_done" and len(t.turns) == 3 for t in trajs)
    for tr in trajs:
        assert len(tr.segments) == 1 and len(tr.ids) == len(tr.loss_mask) == len(tr.old_logprobs)
        policy = [i for i, m in enumerate(tr.loss_mask) if m]
        assert policy == [i for s in tr.turns for i in range(s.start, s.end)]
        # between turns: exactly the template's tool frame around the env's answer, all loss_mask 0 (a
        # turn cut by its token budget first gets the end-of-turn token the policy did not sample)
        obs = tok.decode(tr.ids[tr.turns[0].end:tr.turns[1].start])
        close = "" if tr.turns[0].finish == "stop" else "<|end|>"
        assert obs == f"{close}<|tool|><tool_output>{len(tr.turn_texts[0])} chars</tool_output><|end|><|assistant|>"
        assert all(tr.old_logprobs[i] == 0.0 for i, m in enumerate(tr.loss_mask) if not m)
        assert tr.turn_texts == [tok.decode(tr.ids[s.start:s.end], skip_special_tokens=True) for s in tr.turns]


def test_recomputed_logprobs_equal_the_samplers_on_several_turn_trajectories(tiny):
    # the trainer's forward on the padded batch (right padding, as in the update) reproduces the
    # sampler's log-probabilities of every policy token: fp32, within 1e-5
    model, tok = tiny
    trajs = echo_rollout(tiny, seed=5)
    ids, att, _ = pad_batch([t.ids for t in trajs], tok.pad_token_id, [t.loss_mask for t in trajs], left=False)
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, att)
    worst = 0.0
    for b, tr in enumerate(trajs):
        m = torch.tensor(tr.loss_mask, dtype=torch.bool)
        worst = max(worst, float((lp[b, :len(tr.ids)][m] - torch.tensor(tr.old_logprobs)[m]).abs().max()))
    assert sum(len(t.turns) for t in trajs) >= 18 and worst < 1e-5, worst


def _loss_and_logit_grads(model, tok, seqs, masks, advs, old):
    from rlvr.data.collate import TokenBatch

    grads = {}

    def keep(module, inputs, out):
        out.retain_grad()
        grads["logits"] = out

    handle = model.lm_head.register_forward_hook(keep)
    try:
        stage = RLStage(loss=GRPOLoss(aggregation="seq-mean-token-mean"))
        batch = TokenBatch.from_rows(seqs, masks, tok.pad_token_id, old_logprobs=old, advantages=advs)
        loss, _ = micro_loss(model, batch, stage, {}, on_policy=True)
        model.zero_grad()
        loss.backward()
    finally:
        handle.remove()
    # the head runs only at the positions whose next token is trained on (rlvr.models.lm_head): its rows, in
    # order, are those positions; every other position's logits are never computed, so their gradient is 0
    (seq,), (mask,) = seqs, masks
    rows = [t for t in range(len(seq) - 1) if mask[t + 1] == 1]
    g = grads["logits"].grad
    assert g.shape[0] == len(rows)
    full = torch.zeros(1, len(seq), g.shape[-1])
    full[0, rows] = g
    return full


def test_gradient_is_zero_on_observation_tokens_and_unchanged_on_earlier_turns(tiny):
    model, tok = tiny
    model.train()
    trajs = echo_rollout(tiny, n_tasks=1, G=2, seed=2)
    assign_turn_rewards(trajs, 0.5, 0.0)
    tr = trajs[0]
    adv = [[1.0 + k for k in range(len(tr.turns))]]  # a nonzero advantage on every turn
    from rlvr.trainers.agent import token_advantages

    tok_adv = token_advantages(tr, adv[0])[0]
    g = _loss_and_logit_grads(model, tok, [tr.ids], [tr.loss_mask], [tok_adv], [tr.old_logprobs])
    # logits at position t predict token t+1: rows predicting prompt/observation tokens get exactly 0
    predicts_env = [t for t in range(len(tr.ids) - 1) if tr.loss_mask[t + 1] == 0]
    predicts_policy = [t for t in range(len(tr.ids) - 1) if tr.loss_mask[t + 1] == 1]
    assert torch.count_nonzero(g[0, predicts_env]) == 0
    assert all(torch.count_nonzero(g[0, t]) > 0 for t in predicts_policy)
    # rewrite the last observation after the fact (other text, other length): nothing before it moves
    last = tr.turns[-1]
    prev_end = tr.turns[-2].end
    new_obs = tok("<|tool|><tool_output>something else entirely</tool_output><|end|><|assistant|>",
                  add_special_tokens=False)["input_ids"]
    ids2 = tr.ids[:prev_end] + new_obs + tr.ids[last.start:]
    mask2 = tr.loss_mask[:prev_end] + [0] * len(new_obs) + tr.loss_mask[last.start:]
    old2 = tr.old_logprobs[:prev_end] + [0.0] * len(new_obs) + tr.old_logprobs[last.start:]
    adv2 = tok_adv[:prev_end] + [0.0] * len(new_obs) + tok_adv[last.start:]
    g2 = _loss_and_logit_grads(model, tok, [ids2], [mask2], [adv2], [old2])
    assert torch.allclose(g[0, :prev_end], g2[0, :prev_end], rtol=0, atol=1e-7)
    assert not torch.allclose(g[0, last.start - 1:last.end - 1], g2[0, -(last.end - last.start) - 1:-1])
    model.eval()


def test_a_raising_tool_a_hanging_tool_and_breaking_environments_never_kill_the_batch(tiny, caplog):
    _, tok = tiny
    base = generate_calculator_tasks(1, seed=0, families=("mul_add",))[0]
    tasks = []
    for env in ("calc_raising", "calc_hanging", "calc_breaking", "calc_hanging_env", "calculator"):
        t = json.loads(json.dumps(base.to_dict()))
        t["gold"]["env"], t["id"], t["prompt"] = env, f"t-{env}", f"{base.prompt} [{env}]"
        tasks.append(type(base).from_dict(t))
    a, b = 139, 71
    script = {f"[{t.gold['env']}]": [compact_call("mul", a=a, b=b), compact_call("add", a=a * b, b=4543), str(a * b + 4543)]
              for t in tasks}
    loop = AgentLoopConfig(max_turns=4, max_new_tokens=64, max_total_tokens=500, tool_timeout_s=0.2,
                           step_timeout_s=0.6)
    col = MultiTurnCollector(ScriptedEngine(tok, script), tok, loop)
    t0 = time.monotonic()
    raising, hanging, breaking, hanging_env, ok = col.collect(tasks, 1)
    assert time.monotonic() - t0 < 5.0
    assert raising.valid and "error: tool mul failed (ZeroDivisionError)" in tok.decode(raising.ids)
    assert "error: tool mul timed out after 0.2s" in tok.decode(hanging.ids)
    assert raising.turns[0].tool_errors == 1 and hanging.turns[0].tool_errors == 1
    assert raising.verdict.outcome == hanging.verdict.outcome == "pass"  # the script never needed the tool's answer
    assert raising.verdict.details["tool_errors"] == hanging.verdict.details["tool_errors"] == 1
    assert breaking.end == "infra" and breaking.verdict.outcome == "infra" and "went away" in breaking.error
    assert hanging_env.end == "infra" and "did not return within 0.6s" in hanging_env.error
    assert ok.verdict.outcome == "pass" and ok.end == "final" and len(ok.turns) == 3
    rows = build_agent_batch([raising, hanging, breaking, hanging_env, ok], [[1.0] * 3] * 5, needs_all=False)
    assert len(rows) == 3  # the two broken environments are kept out of the training rows


def test_error_observations_reach_the_policy(tiny):
    _, tok = tiny
    task = generate_calculator_tasks(1, seed=0, families=("mul_add",))[0]
    task.gold["env"], task.prompt = "calc_raising", task.prompt + " [r]"
    col = MultiTurnCollector(ScriptedEngine(tok, {"[r]": [compact_call("mul", a=1, b=2), "3"]}), tok, SCRIPTED)
    (tr,) = col.collect([task], 1)
    between = tok.decode(tr.ids[tr.turns[0].end:tr.turns[1].start])
    assert "<tool_output>error: tool mul failed (ZeroDivisionError)</tool_output>" in between


def test_replay_verifier_agrees_with_the_live_end_state_on_every_trajectory(tiny):
    model, tok = tiny
    tasks = generate_calculator_tasks(6, seed=4)
    script = {t.prompt: json.loads(t.solution) for t in tasks[:3]}  # demonstrations: all pass
    script.update({t.prompt: [compact_call("mul", a=1, b=2), compact_call("add", a=2, b=2), compact_call("sub", a=1, b=1),
                              compact_call("mul", a=9, b=9), "4"] for t in tasks[3:]})  # budget overrun, wrong
    trajs = MultiTurnCollector(ScriptedEngine(tok, script), tok, SCRIPTED).collect(tasks, 2)
    trajs += MultiTurnCollector(HFEngine(model, tok), tok, LOOP).collect(tasks, 2, seed=1)  # random policy
    assert [t.verdict.outcome for t in trajs[:6]] == ["pass"] * 6
    assert {t.verdict.outcome for t in trajs[6:12]} == {"violation"}
    assert all(t.valid and not t.verdict.details.get("replay_disagrees") for t in trajs)


def test_a_replay_disagreement_is_infra_and_logged(tiny, caplog):
    _, tok = tiny
    task = generate_calculator_tasks(1, seed=0, families=("mul_add",))[0]
    task.gold["env"] = "calc_flaky"
    script = {task.prompt: [task.gold["goal"]["answer"]]}
    with caplog.at_level(logging.ERROR):
        (tr,) = MultiTurnCollector(ScriptedEngine(tok, script), tok, SCRIPTED).collect([task], 1)
    assert tr.verdict.outcome == "infra" and tr.verdict.details["replay_disagrees"]
    assert "replay verifier says" in caplog.text


def test_leaked_goal_in_an_observation_is_infra_never_a_reward(tiny, monkeypatch):
    from rlvr.envs.calculator import CalculatorEnv

    class Leaky(CalculatorEnv):
        def tool_mul(self, a, b):
            return json.dumps(self._task.gold["goal"])

    monkeypatch.setitem(registry.ENVIRONMENTS, "calculator", Leaky)
    _, tok = tiny
    task = generate_calculator_tasks(1, seed=0, families=("mul_add",))[0]
    answer = task.gold["goal"]["answer"]
    script = {task.prompt: [compact_call("mul", a=1, b=1), answer]}
    (tr,) = MultiTurnCollector(ScriptedEngine(tok, script), tok, SCRIPTED).collect([task], 1)
    assert tr.verdict.outcome == "infra" and tr.verdict.reward == 0.0 and tr.verdict.details["leaks"]
    assert "[redacted]" in tok.decode(tr.ids)


def test_limits_end_trajectories_without_outgrowing_the_token_cap(tiny):
    trajs_turns = echo_rollout(tiny, n_tasks=1, G=2)
    model, tok = tiny
    loop = AgentLoopConfig(max_turns=2, max_new_tokens=12, max_total_tokens=400)
    trajs = MultiTurnCollector(HFEngine(model, tok), tok, loop).collect([echo_task(0, turns=9)], 2)
    assert all(t.end == "max_turns" and len(t.turns) == 2 for t in trajs)
    tight = AgentLoopConfig(max_turns=9, max_new_tokens=12, max_total_tokens=len(trajs_turns[0].ids) - 30)
    trajs = MultiTurnCollector(HFEngine(model, tok), tok, tight).collect([echo_task(0, turns=9)], 2)
    assert all(t.end == "tokens" and len(t.ids) <= tight.max_total_tokens for t in trajs)
    slow = AgentLoopConfig(max_turns=9, max_new_tokens=12, max_total_tokens=400, trajectory_timeout_s=1e-6)
    trajs = MultiTurnCollector(HFEngine(model, tok), tok, slow).collect([echo_task(0, turns=9)], 1)
    assert trajs[0].end == "wall_clock" and len(trajs[0].turns) == 1


def test_demonstrations_are_laid_out_exactly_like_a_rollout(tiny):
    _, tok = tiny
    tasks = generate_calculator_tasks(4, seed=2)
    script = {t.prompt: json.loads(t.solution) for t in tasks}
    trajs = MultiTurnCollector(ScriptedEngine(tok, script), tok, SCRIPTED).collect(tasks, 1)
    for task, tr in zip(tasks, trajs):
        ids, mask = demo_example(tok, task)
        assert (ids, mask) == (tr.ids, tr.loss_mask) and tr.passed


QWEN_LIKE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' + '\\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
DROPS_REASONING = ("{% for m in messages %}{% set c = m['content'] %}"
                   "{% if m['role'] == 'assistant' and not loop.last %}{% set c = c.split('</think>')[-1] %}{% endif %}"
                   "{{ '<|' + m['role'] + '|>' + c + '<|end|>' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def test_observation_frame_keeps_the_newline_after_the_end_of_turn_token():
    _, tok = build_tiny(size="test")
    tok.chat_template = QWEN_LIKE
    tm = TurnTemplate(tok)
    assert (tm.pre, tm.post) == ("\n<|tool|>", "<|end|>\n<|assistant|>")


def test_a_template_that_rewrites_history_splits_the_trajectory_into_exact_samples(tiny):
    _, tok0 = tiny
    _, tok = build_tiny(size="test")
    tok.chat_template = DROPS_REASONING
    task = generate_calculator_tasks(1, seed=0, families=("mul_add",))[0]
    script = {task.prompt: ["<think>first the product</think>" + compact_call("mul", a=2, b=3),
                            "<think>then</think>" + compact_call("add", a=6, b=1), "7"]}
    loop = AgentLoopConfig(max_turns=4, max_new_tokens=64, max_total_tokens=600, history="template")
    (tr,) = MultiTurnCollector(ScriptedEngine(tok, script), tok, loop).collect([task], 1)
    assert len(tr.segments) == 3 and [s.segment for s in tr.turns] == [0, 1, 2]
    for span in tr.turns:  # each turn's ids sit, unchanged, after the exact context it was sampled from
        seg = tr.segments[span.segment]
        assert tok.decode(seg.ids[span.start:span.end], skip_special_tokens=True) == span.text
        assert seg.loss_mask[span.start:span.end] == [1] * (span.end - span.start)
        assert "<think>" not in tok.decode(seg.ids[:span.start])  # the template dropped earlier reasoning
    per_turn = turn_advantages([tr], TrajectoryCredit())  # one trajectory: zero advantage, but rows exist
    assert len(build_agent_batch([tr], [[0.5, 0.5, 0.5]], needs_all=False)) == 3 and per_turn == [[0.0] * 3]
    # with a template that keeps history, the same script is one sample
    (tr1,) = MultiTurnCollector(ScriptedEngine(tok0, script), tok0, loop).collect([task], 1)
    assert len(tr1.segments) == 1
