"""In-process generation with an HF causal LM: one batched, KV-cached sampling loop for all samples.

Prompts are left-padded; every row advances one token per step; rows that hit a stop token or a stop
string are frozen and the loop ends when all rows are done. Each row is returned cut right after the
token that ended it (the stop token, or the token that completed a stop string: both are kept and
trained on), with finish reason ``eos``, ``stop`` or ``length``; the filler a frozen row receives while
others run is never returned. Sampled-token logprobs are those of the
distribution drawn from: ``log_softmax(logits / temperature)``, restricted to the top-k / top-p kept tokens
and renormalised when those are set (``rlvr.models.truncation``) — the same quantity the trainer recomputes —
so the importance ratio is exactly 1 on the first policy iteration.

Hot-path choices (measured in bench/grpo_vs_trl.py, docs/benchmarks.md):
- the KV cache is preallocated for ``prompt + max_new_tokens`` positions and written in place
  (``_PreallocLayer``), instead of HF's DynamicCache which re-concatenates the whole cache every token
  (O(T²) copying: ~40% of a tiny model's decode time);
- finished rows are dropped from the batch (``decoder.select``) once a tenth of the rows still being
  computed are done, so the forward pass and the sampling run on live rows only. A dropped row's slot is
  filled by a live row from the tail (``swap_remove``), so a drop copies one row's KV cache per finished
  row instead of the whole cache (with the front-compacting order the copy cost more than dropping
  rows at every tenth saved; measured 3-5% of generate at 1m/5m, bench/grpo_vs_trl.py shapes). Sampling is by inverse
  CDF with one uniform per row per token, drawn for all rows (dropped ones discarded), so the random
  stream a live row sees does not depend on when others finish;
- the attention mask is a view of one preallocated buffer (no per-token ``cat``) and is not passed at all
  when no prompt is padded;
- with ``fast_decode=True`` (default) a supported model (Llama / Qwen2 / Mistral architecture, no LoRA)
  decodes with ``rlvr.rollout.fast_decode.FastDecoder`` (under ``bf16``: its projections in bf16, the
  rest in float32, as bf16 autocast runs them): the same function computed
  by a flat loop of tensor ops on the model's own Parameters, its own preallocated KV cache, and none of
  HF's per-call Python overhead (~2 ms a token on CPU). Anything else uses the HF forward
  (``_HFDecoder``); ``engine.decode_path`` says which one the last ``generate()`` used and why.
"""

from __future__ import annotations

import logging

import torch

from rlvr import omp_wait
from rlvr.console import detail, keep_detail
from rlvr.models.kv_cache import cache_kwarg
from rlvr.models.logprobs import autocast_ctx
from rlvr.models.truncation import Truncation, kept_tokens
from rlvr.rollout.engine import Generation, SamplingParams
from rlvr.rollout.fast_decode import FastDecoder, distinct_rows, unsupported_reason
from rlvr.rollout.seeds import RowStream, draw_uniforms

log = logging.getLogger(__name__)

REASONS = ("length", "eos", "stop")
"""Finish reasons: the budget ran out; a stop token (eos, end of turn) was sampled; a stop string appeared."""
LENGTH, EOS, STOP = range(3)

COMPACT_FRACTION = 0.1
"""Drop finished rows from the forward batch once they are this fraction of the rows still computed."""


SINGLE_THREAD_DECODE_WORK = 1.5e8
"""``decode_threads: auto`` with idle threads that sleep at once (``OMP_WAIT_POLICY=PASSIVE``, ``rlvr.omp_wait``):
a CPU decode batch of fewer than this many (rows × model parameters) runs on one thread. Measured with 2
threads available (64 rows, load ~3): the 1m tiny model
(0.87M parameters, 5.5e7) generates 1.19× faster on one thread; the 5m one (4.8M, 3.1e8) 1.10× faster on two.
When idle threads spin first (the default of a run with the cores to itself) two threads win at both sizes
(idle, 10 pairs: 1m 0.123 vs 0.176 s, 5m 0.435 vs 0.569 s, the same samples), so the threshold
applies only to the passive policy."""


class HFEngine:
    """Samples from ``model`` (the training model itself: no weight copy, no sync needed)."""

    def __init__(self, model, tokenizer, batch_size: int = 512, bf16: bool = False,
                 fast_decode: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.bf16 = bf16
        self.fast_decode = fast_decode
        self.decode_path = ""
        """``fast`` or ``hf: <why>`` for the last generate() batch."""

    def sync_weights(self, model) -> None:
        self.model = model

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        rows = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        if params.row_seeds is not None and len(params.row_seeds) != len(rows):
            raise ValueError(f"row_seeds has {len(params.row_seeds)} seeds for {len(rows)} rows (prompts x n)")
        dev = self.model.device
        gen = torch.Generator(dev).manual_seed(params.seed) if params.seed is not None else None
        out = Generation([], [], [], [], [], [])
        was_training, threads = self.model.training, torch.get_num_threads()
        self.model.eval()
        want = self.decode_threads(params.threads, min(len(rows), self.batch_size))
        if want is not None:
            torch.set_num_threads(want)
        try:
            with keep_detail():
                for s in range(0, len(rows), self.batch_size):
                    detail(f"generated {s} of {len(rows)} rows")  # for the heartbeat (rlvr.console)
                    chunk = rows[s:s + self.batch_size]
                    rng = gen if params.row_seeds is None else RowStream(params.row_seeds[s:s + len(chunk)], dev)
                    ids, lps, reasons = self._generate_batch([p for _, p in chunk], params, rng)
                    for (pi, p), c, lp, r in zip(chunk, ids, lps, reasons):
                        out.prompt_ids.append(p)
                        out.completion_ids.append(c)
                        out.old_logprobs.append(lp)
                        out.finish_reason.append(r)
                        out.prompt_index.append(pi)
        finally:
            self.model.train(was_training)
            if want is not None:
                torch.set_num_threads(threads)
        out.texts = self.tokenizer.batch_decode(out.completion_ids, skip_special_tokens=True)
        return out

    def decode_threads(self, threads, rows: int) -> int | None:
        """The intra-op thread count to generate ``rows`` rows at a time with (None: leave torch's)."""
        if threads != "auto":
            return threads
        if self.model.device.type != "cpu" or torch.get_num_threads() == 1:
            return None
        if omp_wait.spins():  # no wake-up a token: two threads are faster even at the 1m model
            return None
        work = rows * sum(p.numel() for p in self.model.parameters())
        return 1 if work < SINGLE_THREAD_DECODE_WORK else None

    def _generate_batch(self, prompts, params: SamplingParams, gen):
        pad = self.tokenizer.pad_token_id
        B, P, N = len(prompts), max(len(p) for p in prompts), params.max_new_tokens
        dev = self.model.device
        ids = torch.tensor([[pad] * (P - len(p)) + list(p) for p in prompts], dtype=torch.long, device=dev)
        att = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=dev)
        pos = (att.cumsum(-1) - 1).clamp_min(0)
        stop = torch.tensor(sorted(set(params.stop_token_ids)), dtype=torch.long, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        ends = torch.full((B,), N, dtype=torch.long, device=dev)  # tokens kept per row
        why = torch.full((B,), LENGTH, dtype=torch.long, device=dev)  # index into REASONS
        toks, lps = [], []
        decoder = self._decoder(att, P + N)
        live = torch.arange(B, device=dev)  # the original row of each row of the forward batch
        n_live = B
        cur_ids, cur_pos = ids, pos
        greedy = params.greedy or params.temperature == 0
        for _ in range(N):
            logits = decoder(cur_ids, cur_pos).float()
            # one uniform per row, dropped rows included: a row's draws do not depend on when others finish
            u = None if greedy else draw_uniforms(gen, B, dev)
            if n_live < B:
                nxt_live, lp_live = _sample(logits, params, None if greedy else u.index_select(0, live))
                nxt = torch.full((B,), pad, dtype=torch.long, device=dev).index_copy_(0, live, nxt_live)
                lp = logits.new_zeros(B).index_copy_(0, live, lp_live)
            else:
                nxt, lp = _sample(logits, params, u)
            nxt.masked_fill_(done, pad)
            lp.masked_fill_(done, 0.0)
            toks.append(nxt)
            lps.append(lp)
            new = torch.isin(nxt, stop) & ~done  # rows ending at this token: it is their last kept one
            why.masked_fill_(new, EOS)
            if params.stop_strings:
                by_string = self._hit_stop_string(toks, params.stop_strings) & ~done & ~new
                why.masked_fill_(by_string, STOP)
                new |= by_string
            ends.masked_fill_(new, len(toks))
            done |= new
            n_done = int(done.sum())  # the loop's one host sync per token
            if n_done == B:
                break
            cur_pos = cur_pos[:, -1:] + 1
            finished = n_done - (B - n_live)  # done rows still in the forward batch
            if finished >= max(1, COMPACT_FRACTION * n_live):
                keep = swap_remove(done.index_select(0, live), finished)
                live, cur_pos = live.index_select(0, keep), cur_pos.index_select(0, keep)
                decoder.select(keep)
                n_live -= finished
            cur_ids = (nxt.index_select(0, live) if n_live < B else nxt)[:, None]
        return _collect(toks, lps, ends, why)

    def _decoder(self, prompt_mask: torch.Tensor, capacity: int):
        """FastDecoder when enabled and supported (bf16: its projections in bf16, as autocast), else the HF
        forward."""
        why = "fast_decode=False" if not self.fast_decode else unsupported_reason(self.model, capacity)
        if why is None:
            self.decode_path = "fast"
            return FastDecoder(self.model, prompt_mask, capacity, torch.bfloat16 if self.bf16 else None)
        if self.fast_decode and self.decode_path != f"hf: {why}":
            log.info("HFEngine: decoding with the HF forward (%s)", why)
        self.decode_path = f"hf: {why}"
        return _HFDecoder(self.model, prompt_mask, capacity, self.bf16)

    def _hit_stop_string(self, toks, stops) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(torch.stack(toks, 1)[:, -16:], skip_special_tokens=True)
        return torch.tensor([any(s in t for s in stops) for t in texts], device=self.model.device)


class _HFDecoder:
    """The model's own forward over a preallocated DynamicCache: ``(ids, pos) -> last logits``; the prompt
    pass forwards each distinct prompt once."""

    def __init__(self, model, prompt_mask: torch.Tensor, capacity: int, bf16: bool):
        B, P = prompt_mask.shape
        self.model, self.bf16, self.length = model, bf16, 0
        self.padded = bool((prompt_mask == 0).any())
        self.att = torch.ones((B, capacity), dtype=torch.long, device=prompt_mask.device)
        self.att[:, :P] = prompt_mask  # a row's generated tokens are always attended
        self.cache = make_cache(capacity)
        self.cache_kw = cache_kwarg(model)

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if self.length == 0:
            return self._prefill(ids, pos)
        self.length += ids.shape[1]
        return self._forward(ids, pos, self.att[:, :self.length] if self.padded else None)

    def _prefill(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The prompts' forward; a prompt repeated in several rows (a GRPO group) is computed once and its
        cache copied to its rows."""
        P = ids.shape[1]
        self.length = P
        att = self.att[:, :P]
        first, inv = distinct_rows(torch.cat([ids, att], 1))
        if first is None:
            return self._forward(ids, pos, att if self.padded else None)
        logits = self._forward(ids[first], pos[first], att[first] if self.padded else None)
        self.cache.batch_select_indices(inv)
        return logits.index_select(0, inv)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, att: torch.Tensor | None) -> torch.Tensor:
        with autocast_ctx(self.bf16, ids.device.type):
            return self.model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True,
                              logits_to_keep=1, **{self.cache_kw: self.cache}).logits[:, -1]

    def select(self, keep: torch.Tensor) -> None:
        self.att = self.att[keep]
        self.cache.batch_select_indices(keep)


def make_cache(capacity: int):
    """A DynamicCache whose layers are preallocated for ``capacity`` positions (plain one if unsupported)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    layer_cls = _prealloc_layer_class()
    if layer_cls is not None and getattr(cache, "layer_class_to_replicate", None) is not None and not cache.layers:
        cache.layer_class_to_replicate = lambda: layer_cls(capacity)
    return cache


_LAYER_CLS: list = []


def _prealloc_layer_class():
    """``_PreallocLayer`` built on this transformers' DynamicLayer, or None where there is no layer API."""
    if _LAYER_CLS:
        return _LAYER_CLS[0]
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        _LAYER_CLS.append(None)
        return None

    class _PreallocLayer(DynamicLayer):
        """A full-attention cache layer written in place into ``[B, H, capacity, D]`` buffers.

        ``keys``/``values`` are views of the first ``n`` positions, so attention reads exactly what
        DynamicLayer would hold; only the O(T) append replaces DynamicLayer's O(T) re-concatenation.
        """

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.n = capacity, 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                b, h, _, d = key_states.shape
                self._k = key_states.new_empty(b, h, self.capacity, d)
                self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
            end = self.n + key_states.shape[-2]
            if end > self._k.shape[2]:  # longer than planned: grow (amortised doubling)
                self._k, self._v = _grow(self._k, self.n, end), _grow(self._v, self.n, end)
            self._k[:, :, self.n:end] = key_states
            self._v[:, :, self.n:end] = value_states
            self.n = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.n

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.n > 0:
                self._k, self._v = self._k.index_select(0, indices), self._v.index_select(0, indices)
                self.keys, self.values = self._k[:, :, :self.n], self._v[:, :, :self.n]

        def reset(self) -> None:
            super().reset()
            self.n = 0

        def crop(self, tokens_to_remove: int) -> None:
            super().crop(tokens_to_remove)
            if self.is_initialized and tokens_to_remove < 0:
                self.n = max(0, self.n + tokens_to_remove)

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.n > 0:
                self._k = self._k.repeat_interleave(repeats, dim=0)
                self._v = self._v.repeat_interleave(repeats, dim=0)
                self.keys, self.values = self._k[:, :, :self.n], self._v[:, :, :self.n]

    _LAYER_CLS.append(_PreallocLayer)
    return _PreallocLayer


def _grow(buf: torch.Tensor, used: int, need: int) -> torch.Tensor:
    new = buf.new_empty(buf.shape[0], buf.shape[1], max(need, 2 * buf.shape[2]), buf.shape[3])
    new[:, :, :used] = buf[:, :, :used]
    return new


def swap_remove(dead: torch.Tensor, n_dead: int) -> torch.Tensor:
    """The rows to keep (``keep[i]``: the current row that becomes row i) when the rows flagged ``dead``
    leave the batch: live rows keep their place, and each dead row among the first ``len - n_dead`` is
    replaced by a live row from the tail, so only as many rows move as there are dead ones in front."""
    n = dead.numel() - n_dead
    keep = torch.arange(n, device=dead.device)
    holes = dead[:n].nonzero().squeeze(-1)
    if len(holes):
        keep[holes] = (~dead[n:]).nonzero().squeeze(-1) + n
    return keep


def _sample(logits: torch.Tensor, params: SamplingParams, u: torch.Tensor | None):
    """Greedy (``u`` None) or temperature / top-k / top-p sampling with uniforms ``u [rows, 1]``; returns tokens
    and their log-probability under the distribution drawn from: ``log_softmax(logits / T)`` restricted to the
    kept tokens and renormalised (``rlvr.models.truncation``; greedy: under logits / 1, unrestricted)."""
    if u is None:
        logp = torch.log_softmax(logits, -1)
        nxt = logits.argmax(-1)
        return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)
    z = logits / params.temperature if params.temperature != 1.0 else logits
    logp = torch.log_softmax(z, -1)
    trunc = Truncation.of(params)
    if trunc.active:
        logp = logp.masked_fill(~kept_tokens(z, trunc), float("-inf"))
        logp = logp - torch.logsumexp(logp, -1, keepdim=True)  # renormalised over the kept tokens
    nxt = _draw(logp.exp(), u)
    return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)


def _draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row by inverse CDF: the first index whose cumulative probability reaches v.

    ``v = (1 - u) · Σp`` with ``u ~ U[0, 1)``, so ``v ∈ (0, Σp]``: an index is drawn with probability
    ``p_i / Σp`` and a zero-probability token (top-p cut) never is. One uniform per row, where
    ``torch.multinomial`` draws an exponential per vocabulary entry (~70 µs a step at 32 × 105 on CPU).
    """
    cdf = probs.cumsum(-1)
    return torch.searchsorted(cdf, (1 - u) * cdf[:, -1:]).squeeze(-1)


def _collect(toks, lps, ends, why):
    """Per row: the sampled tokens up to and including the one that ended it, their logprobs, the reason."""
    T = torch.stack(toks, 1).tolist()
    L = torch.stack(lps, 1).tolist()
    ends, why = ends.tolist(), why.tolist()
    return ([row[:e] for row, e in zip(T, ends)], [row[:e] for row, e in zip(L, ends)],
            [REASONS[w] for w in why])
