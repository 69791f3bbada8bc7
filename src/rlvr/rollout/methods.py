"""Rollout-side 2026 methods of the RL stage: EDEN, OC-GRPO, Double-Rollout, GA-GRPO guidance,
and the teacher forward of Residual Advantage. Each is an option of the stage (``rlvr.config.methods``)
that changes which samples a group holds or what they are worth; the loss is untouched.

A group is assembled from parts (plain samples, EDEN samples, gold demonstrations, privileged samples)
row by row (:func:`assemble`), so every part keeps its rewards, verdicts and logprobs. What a part changes
in the update travels per row in ``Rollouts.row_extras``: ``adv_weight`` (a multiplier of the row's
advantage) and ``token_is`` (per-token importance weights of its completion, or None).

Samples drawn from a conditioning the trained policy never sees (EDEN's extra position, OC-GRPO's
privileged prompt) are trained on the plain prompt: their ``old_logprobs`` are recomputed there (no grad),
so the sampler/trainer mismatch correction sees an on-policy row; OC-GRPO's distribution shift is
corrected by ``token_is`` instead, EDEN's by its down-weighted advantage only (as in the paper).
"""

from __future__ import annotations

import contextlib
import math

import torch

from rlvr.data.chat import encode_completion, encode_prompt
from rlvr.data.collate import pad_batch
from rlvr.data.types import Task, with_ids
from rlvr.errors import ConfigError
from rlvr.models.logprobs import token_logprobs
from rlvr.models.truncation import NONE as NO_TRUNCATION
from rlvr.models.truncation import Truncation
from rlvr.rollout.collector import RewardContext, Rollouts, collect, compose_rewards
from rlvr.rollout.engine import SamplingParams
from rlvr.verifiers.base import INFRA_OUTCOMES

# ---------------------------------------------------------------------------------------- assembly


def _row_extras(ro: Rollouts, i: int) -> dict:
    ex = ro.row_extras
    return {"adv_weight": ex["adv_weight"][i] if "adv_weight" in ex else 1.0,
            "token_is": ex["token_is"][i] if "token_is" in ex else None}


def assemble(tasks: list[Task], G: int, picks: list[tuple[Rollouts, int]]) -> Rollouts:
    """A batch of ``len(tasks)`` groups of ``G`` whose row ``g*G + j`` is ``picks[g*G + j] = (part, row)``."""
    assert len(picks) == len(tasks) * G
    flat = lambda p, name: getattr(p, name).reshape(-1)  # noqa: E731
    col = lambda name: [getattr(p, name)[r] for p, r in picks]  # noqa: E731
    ten = lambda name: torch.stack([flat(p, name)[r] for p, r in picks]).view(len(tasks), G)  # noqa: E731
    keys = picks[0][0].reward_terms.keys() if picks else []
    terms = {k: torch.stack([p.reward_terms[k].reshape(-1)[r] for p, r in picks]).view(len(tasks), G) for k in keys}
    secs: dict[str, float] = {}
    for p in {id(p): p for p, _ in picks}.values():
        for k, v in p.seconds.items():
            secs[k] = secs.get(k, 0.0) + v
    extras = [_row_extras(p, r) for p, r in picks]
    return Rollouts(tasks, G, col("prompt_ids"), col("completion_ids"), col("old_logprobs"), col("finish_reason"),
                    col("texts"), ten("rewards"), ten("valid"), ten("passed"), col("outcomes"), terms, secs,
                    [p.policy_version[r] for p, r in picks] if all(p.policy_version for p, _ in picks) else [],
                    row_extras={"adv_weight": [e["adv_weight"] for e in extras],
                                "token_is": [e["token_is"] for e in extras]})


def merge_groups(tasks: list[Task], parts: list[Rollouts]) -> Rollouts:
    """Groups made of each part's samples of the same task, part after part."""
    sizes = [p.group_size for p in parts]
    picks = [(p, g * k + j) for g in range(len(tasks)) for p, k in zip(parts, sizes) for j in range(k)]
    return assemble(tasks, sum(sizes), picks)


def set_extra(ro: Rollouts, key: str, values: list) -> Rollouts:
    ro.row_extras[key] = values
    return ro


# ---------------------------------------------------------------------------------------- logprobs


@torch.no_grad()
def completion_logprobs(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                        temperature: float, micro: int = 64, truncation: Truncation = NO_TRUNCATION) -> list[list[float]]:
    """Per row, the logprobs of its completion tokens given ``prompt`` under ``model`` (no grad), under the
    sampling's ``truncation`` (top-k / top-p: what the engine records and the update recomputes)."""
    out: list[list[float]] = []
    was = model.training
    model.eval()
    try:
        for s in range(0, len(prompts), micro):
            rows = [p + c for p, c in zip(prompts[s:s + micro], completions[s:s + micro])]
            if not rows:
                continue
            ids, att, _ = pad_batch(rows, pad_id, left=False, device=model.device)
            lp, _ = token_logprobs(model, ids, att, temperature, truncation=truncation)
            for k, (p, c) in enumerate(zip(prompts[s:s + micro], completions[s:s + micro])):
                out.append(lp[k, len(p): len(p) + len(c)].tolist())
    finally:
        model.train(was)
    return out


# -------------------------------------------------------------------------------------------- EDEN


@contextlib.contextmanager
def perturbed_position(model, marker_id: int, noise_std: float, seed: int):
    """While active, every prompt position holding ``marker_id`` embeds as ``anchor + σ · rms(E) · ε``
    (``anchor``: the mean token embedding; ε ~ N(0, I), a fresh draw per occurrence from a generator seeded by
    ``seed``). Only multi-token (prefill) calls are touched, so a generated ``marker_id`` is embedded as usual.
    A forward hook on the input embedding: the engine takes the model's own forward while it is registered."""
    emb = model.get_input_embeddings()
    weight = emb.weight.detach()
    anchor = weight.float().mean(dim=0)
    rms = float(weight.float().pow(2).mean().sqrt())
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def hook(module, args, output):
        ids = args[0]
        if ids.dim() != 2 or ids.shape[1] < 2:
            return output
        where = ids == marker_id
        n = int(where.sum())
        if n == 0:
            return output
        noise = torch.randn(n, output.shape[-1], generator=gen).to(output.device)
        out = output.clone()
        out[where] = (anchor.to(output.device) + noise_std * rms * noise).to(output.dtype)
        return out

    handle = emb.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def eden_marker(tok) -> int:
    """The token id standing for EDEN's extra position (the pad id: never part of a real prompt)."""
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def eden_part(cfg, model, engine, tok, tasks, judge, sampling, rewards, k: int, seed: int) -> Rollouts:
    """``k`` samples per task from the prompt plus EDEN's perturbed position, re-based on the plain prompt."""
    if getattr(engine, "model", None) is not model:
        raise ConfigError(f"eden: the perturbed position is a forward hook on the trainer's model, but the rollout "
                          f"engine ({type(engine).__name__}) samples from another copy that would not see it; EDEN "
                          "needs the in-process HF engine (distributed.engine: hf, backend: local)")
    marker = eden_marker(tok)
    with perturbed_position(model, marker, cfg.noise_std, seed):
        part = collect(engine, tok, tasks, judge, sampling.model_copy(update={"group_size": k}), rewards, seed,
                       prompt_fn=lambda t: encode_prompt(tok, t) + [marker])
    part.prompt_ids = [p[:-1] for p in part.prompt_ids]
    part.old_logprobs = completion_logprobs(model, part.prompt_ids, part.completion_ids, tok.pad_token_id,
                                            sampling.temperature, truncation=Truncation.of(sampling))
    return set_extra(part, "adv_weight", [cfg.advantage_weight] * len(part.prompt_ids))


# ---------------------------------------------------------------------------------------- guidance


def guidance_weight(cfg, step: int) -> float:
    """GA-GRPO's decreasing weight ``λ(t) = λ0 · T0 / (T0 + t)``."""
    return cfg.weight * cfg.decay_steps / (cfg.decay_steps + step)


def demo_part(cfg, model, tok, tasks, judge, sampling, rewards, step: int) -> Rollouts:
    """``demos_per_group`` copies of each task's gold demonstration, verified and scored like samples,
    with advantage weight λ(step). A task without a demonstration is a data error for guidance."""
    k = cfg.demos_per_group
    missing = [t.id for t in tasks if not t.solution]
    if missing:
        raise ValueError(f"guidance needs tasks with a 'solution' (gold demonstration); {missing[:3]} have none")
    prompts = [encode_prompt(tok, t) for t in tasks for _ in range(k)]
    full = [encode_completion(tok, t.solution) for t in tasks for _ in range(k)]
    comps = [c[: sampling.max_new_tokens] for c in full]  # the tokens trained on are the tokens judged
    reasons = ["length" if len(f) > len(c) else "eos" for f, c in zip(full, comps)]
    texts = tok.batch_decode(comps, skip_special_tokens=True)
    lps = completion_logprobs(model, prompts, comps, tok.pad_token_id, sampling.temperature,
                              truncation=Truncation.of(sampling))
    rep = [t for t in tasks for _ in range(k)]
    verdicts = judge(rep, with_ids(texts, comps))
    ro = _scored(tasks, k, prompts, comps, lps, reasons, texts, verdicts, rewards, sampling)
    return set_extra(ro, "adv_weight", [guidance_weight(cfg, step)] * len(comps))


def _scored(tasks, k, prompts, comps, lps, reasons, texts, verdicts, rewards, sampling) -> Rollouts:
    rep = [t for t in tasks for _ in range(k)]
    terms = compose_rewards(verdicts, [len(c) for c in comps], rewards, sampling.max_new_tokens,
                            RewardContext(rep, texts))
    total = sum(t.weight * terms[t.key] for t in rewards)
    shape = (len(tasks), k)
    return Rollouts(tasks, k, prompts, comps, lps, reasons, texts, total.view(shape),
                    torch.tensor([v.outcome not in INFRA_OUTCOMES for v in verdicts]).view(shape),
                    torch.tensor([v.passed for v in verdicts]).view(shape), [v.outcome for v in verdicts],
                    {key: v.view(shape) for key, v in terms.items()})


# ------------------------------------------------------------------------------------------ OC-GRPO


def privileged_prompt(tok, task: Task, hint: str) -> list[int]:
    """The prompt with the privileged context appended to the user turn: the gold answer or solution."""
    extra = task.gold.get("answer") if hint == "answer" else task.solution
    priv = Task(**{**task.to_dict(), "prompt": f"{task.prompt} ({extra})", "messages": None}) \
        if task.messages is None else task
    return encode_prompt(tok, priv)


def off_context(cfg, model, engine, tok, ro: Rollouts, judge, sampling, rewards, seed: int) -> tuple[Rollouts, int]:
    """Replace ``fraction`` of every all-wrong group by privileged samples trained on the plain prompt with
    ``token_is = min(exp(logp(y|x) − logp(y|x, gold)), is_cap)``. Returns the batch and how many groups it rescued."""
    G = ro.group_size
    dead = [g for g in range(ro.num_groups) if not bool(ro.passed[g].any())]
    if not dead:
        return ro, 0
    k = max(1, min(G, math.ceil(cfg.fraction * G)))
    sub = [ro.tasks[g] for g in dead]
    part = collect(engine, tok, sub, judge, sampling.model_copy(update={"group_size": k}), rewards, seed,
                   prompt_fn=lambda t: privileged_prompt(tok, t, cfg.hint))
    plain_prompts = [encode_prompt(tok, sub[i // k]) for i in range(len(sub) * k)]
    plain = completion_logprobs(model, plain_prompts, part.completion_ids, tok.pad_token_id, sampling.temperature,
                                truncation=Truncation.of(sampling))
    is_w = [[min(math.exp(min(a - b, 20.0)), cfg.is_cap) for a, b in zip(lp, lq)]
            for lp, lq in zip(plain, part.old_logprobs)]
    part.prompt_ids, part.old_logprobs = plain_prompts, plain
    set_extra(part, "token_is", is_w)
    where = {g: i for i, g in enumerate(dead)}
    picks = [(part, where[g] * k + j - (G - k)) if g in where and j >= G - k else (ro, g * G + j)
             for g in range(ro.num_groups) for j in range(G)]
    return assemble(ro.tasks, G, picks), len(dead)


# ------------------------------------------------------------------------------------- Double-Rollout


def double_rollout(cfg, engine, tok, ro: Rollouts, judge, sampling, rewards, seed: int) -> Rollouts:
    """Each sample's composed reward replaced by the mean over ``continuations`` samples continued from its
    completion cut after ``floor(prefix_fraction · len)`` tokens (verdicts and pass flags stay the original's).

    A continuation of a prefix of ``k`` tokens may add at most ``max_new_tokens - k``: every re-scored
    completion is one the original sampling could have produced (a truncated sample is re-scored on
    completions truncated at the same cap). One engine call decodes to the longest budget; each
    continuation is cut to its own (the tokens before a cap do not depend on the cap)."""
    n, c = len(ro.completion_ids), cfg.continuations
    cut = [int(len(comp) * cfg.prefix_fraction) for comp in ro.completion_ids]
    budget = [max(1, sampling.max_new_tokens - k) for k in cut]
    prompts = [p + comp[:k] for p, comp, k in zip(ro.prompt_ids, ro.completion_ids, cut)]
    params = SamplingParams(n=c, temperature=sampling.temperature, top_p=sampling.top_p,
                            top_k=getattr(sampling, "top_k", 0), max_new_tokens=max(budget, default=1),
                            stop_token_ids=_stops(tok), stop_strings=list(sampling.stop), seed=seed,
                            threads=getattr(sampling, "decode_threads", None))
    gen = engine.generate(prompts, params)
    full = [ro.completion_ids[j][:cut[j]] + gen.completion_ids[i][:budget[j]]
            for i, j in enumerate(gen.prompt_index)]
    texts = tok.batch_decode(full, skip_special_tokens=True)
    rep = [ro.tasks[gen.prompt_index[i] // ro.group_size] for i in range(n * c)]
    verdicts = judge(rep, with_ids(texts, full))
    terms = compose_rewards(verdicts, [len(f) for f in full], rewards, sampling.max_new_tokens,
                            RewardContext(rep, texts))
    total = sum(t.weight * terms[t.key] for t in rewards).view(n, c).mean(dim=1)
    ro.rewards = total.view(ro.num_groups, ro.group_size)
    ro.valid = ro.valid & torch.tensor([v.outcome not in INFRA_OUTCOMES for v in verdicts]).view(n, c).all(1).view(
        ro.num_groups, ro.group_size)
    return ro


def _stops(tok) -> list[int]:
    from rlvr.data.chat import stop_token_ids

    return stop_token_ids(tok)


# --------------------------------------------------------------------------------- Residual Advantage


@torch.no_grad()
def teacher_residuals(student, teacher, ro: Rollouts, pad_id: int, temperature: float, micro: int = 32):
    """Per row, the centred residual advantage of each completion token (see
    ``rlvr.advantages.corrections.residual_advantage``) from full next-token distributions."""
    from rlvr.advantages.corrections import residual_advantage

    out: list[list[float]] = []
    for s in range(0, len(ro.prompt_ids), micro):
        ps, cs = ro.prompt_ids[s:s + micro], ro.completion_ids[s:s + micro]
        rows = [p + c for p, c in zip(ps, cs)]
        ids, att, _ = pad_batch(rows, pad_id, left=False, device=student.device)
        probs = [torch.softmax(m(input_ids=ids, attention_mask=att).logits[:, :-1].float() / temperature, -1)
                 for m in (student, teacher)]
        ps_, pt_ = probs
        nxt = ids[:, 1:, None]
        s_tok, t_tok = ps_.gather(-1, nxt).squeeze(-1), pt_.gather(-1, nxt).squeeze(-1)
        ss, st = (ps_ * ps_).sum(-1), (ps_ * pt_).sum(-1)
        mask = torch.zeros_like(s_tok)
        for k, (p, c) in enumerate(zip(ps, cs)):
            mask[k, len(p) - 1: len(p) - 1 + len(c)] = 1
        g = residual_advantage(ss, st, s_tok, t_tok, mask)
        for k, (p, c) in enumerate(zip(ps, cs)):
            out.append(g[k, len(p) - 1: len(p) - 1 + len(c)].tolist())
    return out


# ---------------------------------------------------------------------------------------- the step


def collect_with_methods(stage, engine, model, tok, tasks, judge, seed: int, step: int) -> tuple[Rollouts, dict]:
    """One rollout batch with the stage's rollout methods: groups of ``G`` made of plain samples, EDEN samples
    and gold demonstrations; then OC-GRPO on the all-wrong groups, then Double-Rollout's reward re-estimate."""
    samp, rw, G = stage.sampling, stage.rewards, stage.sampling.group_size
    k_eden = max(1, round(stage.eden.fraction * G)) if stage.eden.enabled else 0
    k_demo = stage.guidance.demos_per_group if stage.guidance.enabled else 0
    plain = collect(engine, tok, tasks, judge, samp.model_copy(update={"group_size": G - k_eden - k_demo}), rw, seed)
    met: dict = {}
    parts = [plain]
    if k_eden:
        ed = eden_part(stage.eden, model, engine, tok, tasks, judge, samp, rw, k_eden, seed + 7919)
        met["methods/eden_pass_rate"] = float(ed.passed.float().mean())
        parts.append(ed)
    if k_demo:
        parts.append(demo_part(stage.guidance, model, tok, tasks, judge, samp, rw, step))
        met["methods/guidance_weight"] = guidance_weight(stage.guidance, step)
    ro = merge_groups(tasks, parts) if len(parts) > 1 else plain
    if stage.off_context.enabled:
        ro, rescued = off_context(stage.off_context, model, engine, tok, ro, judge, samp, rw, seed + 104729)
        met["methods/oc_groups"] = rescued
    if stage.double_rollout.enabled:
        ro = double_rollout(stage.double_rollout, engine, tok, ro, judge, samp, rw, seed + 15485863)
    return ro, met


def row_advantages(ro: Rollouts, adv: torch.Tensor, residuals: list | None = None, weight: float = 0.0) -> list:
    """Per row, its advantage: a float, or (with per-token importance weights or a residual) a list over its
    completion tokens. ``A_row · adv_weight``, then ``· token_is_t`` per token, then ``+ weight · residual_t``."""
    flat = adv.reshape(-1).tolist()
    aw = ro.row_extras.get("adv_weight") or [1.0] * len(flat)
    ti = ro.row_extras.get("token_is") or [None] * len(flat)
    out: list = []
    for i, a in enumerate(flat):
        a = a * (1.0 if aw[i] is None else aw[i])
        if ti[i] is None and residuals is None:
            out.append(a)
            continue
        n = len(ro.completion_ids[i])
        tok = [a * w for w in ti[i]] if ti[i] is not None else [a] * n
        if residuals is not None:
            tok = [x + weight * r for x, r in zip(tok, residuals[i])]
        out.append(tok)
    return out
