"""In-process generation with an HF causal LM: one batched, KV-cached sampling loop for all samples.

Prompts are left-padded; every row advances one token per step; rows that hit a stop token are frozen
(padded) and the loop ends when all rows are done. Sampled-token logprobs come from
``log_softmax(logits / temperature)`` — the same quantity the trainer recomputes — so the importance
ratio is exactly 1 on the first policy iteration.
"""

from __future__ import annotations

import inspect

import torch

from rlvr.models.logprobs import autocast_ctx
from rlvr.rollout.engine import Generation, SamplingParams


class HFEngine:
    """Samples from ``model`` (the training model itself: no weight copy, no sync needed)."""

    def __init__(self, model, tokenizer, batch_size: int = 512, bf16: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.bf16 = bf16

    def sync_weights(self, model) -> None:
        self.model = model

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        rows = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        gen = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        out = Generation([], [], [], [], [], [])
        was_training = self.model.training
        self.model.eval()
        try:
            for s in range(0, len(rows), self.batch_size):
                chunk = rows[s:s + self.batch_size]
                ids, lps, reasons = self._generate_batch([p for _, p in chunk], params, gen)
                for (pi, p), c, lp, r in zip(chunk, ids, lps, reasons):
                    out.prompt_ids.append(p)
                    out.completion_ids.append(c)
                    out.old_logprobs.append(lp)
                    out.finish_reason.append(r)
                    out.prompt_index.append(pi)
        finally:
            self.model.train(was_training)
        out.texts = self.tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
        return out

    def _generate_batch(self, prompts, params: SamplingParams, gen):
        from transformers import DynamicCache

        pad = self.tokenizer.pad_token_id
        B, P = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((B, P), pad, dtype=torch.long)
        att = torch.zeros((B, P), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, P - len(p):] = torch.tensor(p)
            att[i, P - len(p):] = 1
        pos = (att.cumsum(-1) - 1).clamp_min(0)
        stop = torch.tensor(sorted(set(params.stop_token_ids)), dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        toks, lps = [], []
        cache = DynamicCache()
        cache_kw = cache_kwarg(self.model)
        cur_ids, cur_pos = ids, pos
        for _ in range(params.max_new_tokens):
            with autocast_ctx(self.bf16):
                logits = self.model(input_ids=cur_ids, attention_mask=att, position_ids=cur_pos,
                                    use_cache=True, logits_to_keep=1,
                                    **{cache_kw: cache}).logits[:, -1].float()
            nxt, lp = _sample(logits, params, gen)
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
            lp = torch.where(done, torch.zeros_like(lp), lp)
            toks.append(nxt)
            lps.append(lp)
            live = ~done
            done = done | torch.isin(nxt, stop)
            if params.stop_strings:
                done = done | self._hit_stop_string(toks, params.stop_strings)
            if bool(done.all()):
                break
            att = torch.cat([att, live.long()[:, None]], dim=1)
            cur_ids = nxt[:, None]
            cur_pos = cur_pos[:, -1:] + 1
        return _collect(toks, lps, done, stop, pad)

    def _hit_stop_string(self, toks, stops) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(torch.stack(toks, 1)[:, -16:], skip_special_tokens=True)
        return torch.tensor([any(s in t for s in stops) for t in texts])


def cache_kwarg(model) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(type(base).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _sample(logits: torch.Tensor, params: SamplingParams, gen):
    """Greedy or temperature/top-p sampling; returns tokens and log π(token) under logits/T."""
    if params.greedy or params.temperature == 0:
        logp = torch.log_softmax(logits, -1)
        nxt = logits.argmax(-1)
        return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / params.temperature, -1)
    probs = logp.exp()
    if params.top_p < 1.0:
        sp, si = probs.sort(-1, descending=True)
        keep = (sp.cumsum(-1) - sp) < params.top_p
        sp = sp * keep
        probs = torch.zeros_like(probs).scatter(-1, si, sp)
    nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)


def _collect(toks, lps, done, stop, pad):
    T = torch.stack(toks, 1)
    L = torch.stack(lps, 1)
    ids_out, lp_out, reasons = [], [], []
    stop_set = set(stop.tolist())
    for i, row in enumerate(T.tolist()):
        end = len(row)
        reason = "length"
        for j, t in enumerate(row):
            if t in stop_set:
                end, reason = j + 1, "eos"
                break
        ids_out.append(row[:end])
        lp_out.append(L[i, :end].tolist())
        reasons.append(reason)
    return ids_out, lp_out, reasons
