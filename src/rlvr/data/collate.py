"""Padding and collation of token rows into tensor batches (right padding for training, left for
generation)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def pad_batch(seqs: list[list[int]], pad_id: int, masks: list[list[int]] | None = None, left: bool = True,
              device=None):
    """Pad token lists to a tensor batch ``(input_ids, attention_mask, loss_mask or None)`` on ``device``."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    lm = torch.zeros((len(seqs), T), dtype=torch.float32) if masks is not None else None
    for i, s in enumerate(seqs):
        sl = slice(T - len(s), T) if left else slice(0, len(s))
        ids[i, sl] = torch.tensor(s, dtype=torch.long)
        att[i, sl] = 1
        if lm is not None:
            lm[i, sl] = torch.tensor(masks[i], dtype=torch.float32)
    if device is not None and str(device) != "cpu":
        ids, att = ids.to(device), att.to(device)
        lm = lm.to(device) if lm is not None else None
    return ids, att, lm


SPLIT_OVERHEAD_TOKENS = {"cpu": 64}
"""Fixed cost of one forward/backward call in padded-token equivalents, by device type (others: 4096).
Measured for the tiny models on 2 CPU cores: ~8 ms a call vs ~0.1 ms a token."""


PACKED_OVERHEAD_FACTOR = 16
"""On the packed forward (``rlvr.accel.packed_forward``) padding costs only attention (the projections and
the MLP run on real tokens), ~1/16 of a token's cost at the tiny models' widths, while a cut also stops
rows of one group from sharing their prompt: the per-call cost weighs that much more against padding."""


def split_overhead(model, packed: bool = False) -> int:
    """The per-micro-batch cost (in padded tokens) that :func:`plan_micro_batches` weighs padding against;
    ``packed``: the model takes the padding-free packed forward."""
    device = next(model.parameters()).device.type
    base = SPLIT_OVERHEAD_TOKENS.get(device, 4096)
    return base * PACKED_OVERHEAD_FACTOR if packed else base


MICRO_ACTIVATION_BUDGET = {"cpu": 2048 * 256 * 6}
"""Most tokens × hidden size × layers in one micro-batch, by device type (others: no budget): 2048 tokens of
the 5m tiny model, 6144 of the 1m; padded tokens, or, where the packed forward runs an RL update, the tokens
it computes (a group's prompt once: ``plan_micro_batches(shared=...)``). Activation memory grows with a
micro-batch's tokens and the model's width and depth, while a cut costs a call's fixed cost and the prompt a
group no longer shares, so the budget in tokens shrinks as the model grows. At this budget the
GRPO 5m bench batch is one micro-batch instead of three at half of it: reference pass 0.079 → 0.067 s, update
0.243 → 0.209 s (in-process A/B) for ~+15 MB of peak RSS. See docs/packed_forward.md for the trade-off."""


def micro_token_budget(model, micro_tokens: int | str | None = "auto") -> int | None:
    """The per-micro-batch token budget for ``model``, None: none. ``micro_tokens`` (the recipe's
    ``model.micro_tokens``, passed down by the trainer) wins; ``auto``: :data:`MICRO_ACTIVATION_BUDGET` scaled by
    the model's width and depth."""
    if micro_tokens != "auto":
        return micro_tokens
    budget = MICRO_ACTIVATION_BUDGET.get(next(model.parameters()).device.type)
    cfg = getattr(model, "config", None)
    width = getattr(cfg, "hidden_size", None)
    depth = getattr(cfg, "num_hidden_layers", None)
    if budget is None or not isinstance(width, int) or not isinstance(depth, int):
        return None
    return max(1, budget // (width * depth))


def plan_micro_batches(lengths: list[int], cap: int, overhead: int, budget: int | None = None,
                       groups: list | None = None, shared: list[int] | None = None) -> list[list[int]]:
    """Cut rows into micro-batches of at most ``cap`` rows (and, given ``budget``, at most ``budget`` padded
    tokens, a longer row alone excepted) that minimise padded compute.

    Rows are sorted by length; a micro-batch made of the sorted rows ``[i, j)`` costs
    ``(j - i) * max(lengths[i:j]) + overhead`` (its padded tokens plus a fixed cost per forward/backward).
    An exact dynamic programme over the cut points, O(n * cap), finds the cheapest cutting. The loss
    does not depend on the cutting (every micro-batch divides by the mini-batch's global denominators);
    only the padding the model computes on does. Returns lists of row indices, shortest rows first.

    ``groups`` (a hashable key per row, e.g. its prompt): rows of one group are kept next to each other,
    groups ordered by their longest row, so that a cut forced by ``budget`` splits as few groups as it can
    (the packed forward computes a prefix the rows of one micro-batch share once).

    ``shared`` (with ``groups``; per row, the length of the prefix it shares with the rest of its group, e.g.
    its prompt): the budget counts the tokens the packed forward computes instead of padded ones, a group's
    shared prefix once per micro-batch (``sum(lengths) - (rows of the group - 1) * shared``): what its
    activations take. The cost the cutting minimises is unchanged.
    """
    n = len(lengths)
    if n == 0:
        return []
    if groups is None:
        order = sorted(range(n), key=lambda i: lengths[i])
    else:
        first: dict = {}
        longest: dict = {}
        for i, g in enumerate(groups):
            first.setdefault(g, i)
            longest[g] = max(longest.get(g, 0), lengths[i])
        order = sorted(range(n), key=lambda i: (longest[groups[i]], first[groups[i]], lengths[i]))
    srt = np.array([lengths[i] for i in order], dtype=np.int64)
    packed = _packed_tokens(srt, [groups[i] for i in order], [shared[i] for i in order]) \
        if groups is not None and shared is not None else None
    best = np.zeros(n + 1, dtype=np.int64)
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        lo = max(0, j - cap)
        width = np.maximum.accumulate(srt[lo:j][::-1])[::-1]          # max(lengths[i:j]) for i = lo .. j-1
        size = j - np.arange(lo, j)
        cost = best[lo:j] + size * width + overhead
        if budget is not None:  # over budget: not allowed, unless the micro-batch is one row
            tokens = size * width if packed is None else packed(np.arange(lo, j), j)
            cost = np.where((tokens > budget) & (size > 1), np.iinfo(np.int64).max, cost)
        k = int(cost.argmin())
        best[j], cut[j] = cost[k], lo + k
    micros, j = [], n
    while j > 0:
        micros.append(order[cut[j]:j])
        j = int(cut[j])
    return micros[::-1]


def _packed_tokens(lengths: np.ndarray, groups: list, shared: list[int]):
    """``f(i, j)``: the tokens the packed forward computes for the rows ``[i, j)`` (``i`` an array) of rows whose
    groups are contiguous: their lengths summed, each group's ``shared`` prefix counted once."""
    s = np.array(shared, dtype=np.int64)
    starts = np.array([k == 0 or groups[k] != groups[k - 1] for k in range(len(groups))])
    cum_len, cum_s = np.concatenate([[0], np.cumsum(lengths)]), np.concatenate([[0], np.cumsum(s)])
    cum_first = np.concatenate([[0], np.cumsum(np.where(starts, s, 0))])  # a group's prefix, at its first row

    def f(i: np.ndarray, j: int) -> np.ndarray:
        # every row's prefix off, then one back per group met: row i's own, and each group starting after i
        return cum_len[j] - cum_len[i] - (cum_s[j] - cum_s[i]) + s[i] + cum_first[j] - cum_first[i + 1]
    return f


@dataclass
class TokenBatch:
    """The one batch the policy updates carry and forward (RL, PPO), right-padded to ``[B, T]``.

    ``input_ids [B, T]`` long, ``attention_mask [B, T]`` long, ``loss_mask [B, T]`` float (1 on trained
    tokens); per-token ``old_logprobs``, ``ref_logprobs``, ``advantages`` (a per-row advantage is spread over
    its row), ``values``, ``returns``, ``sampler_logprobs`` (the engine's, where ``old_logprobs`` were
    recomputed by the trainer: the mismatch correction compares the two) ``[B, T]`` float (0 on padding, and
    ``old_logprobs`` 0 on the prompt), or None where the update does not use them; per row, ``rewards [B]`` float
    (the trajectory's reward; PPO's sequence reward) and ``group_ids [B]`` long (the group, i.e. the task, it was
    sampled for), or None; ``skipped_mask [S, T']`` float: the loss masks of valid rows that are not forwarded
    (zero advantage) but count in the loss's denominators, or None.

    Row ids ``0 .. num_rows - 1`` (for :meth:`subset` and the mini-batch shuffle) run over the forwarded rows
    first, then the skipped ones; ``len()`` is the number of forwarded rows.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    sampler_logprobs: torch.Tensor | None = None
    skipped_mask: torch.Tensor | None = None
    group_ids: torch.Tensor | None = None

    PER_TOKEN = ("old_logprobs", "ref_logprobs", "advantages", "values", "returns", "sampler_logprobs")
    PER_ROW = ("rewards", "group_ids")

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def num_rows(self) -> int:
        """Rows counted in the denominators: forwarded and skipped."""
        return len(self) + (0 if self.skipped_mask is None else self.skipped_mask.shape[0])

    def lengths(self) -> list[int]:
        """Each forwarded row's length (its real tokens)."""
        return self.attention_mask.sum(dim=1).tolist()

    def prompts(self) -> list[tuple[int, ...] | None]:
        """Each forwarded row's ids before its first trained token (its prompt), None for a row that trains on no
        token (read on the CPU in one pass)."""
        lm, ids = self.loss_mask.cpu(), self.input_ids.cpu()
        has, first = lm.any(dim=1).tolist(), lm.argmax(dim=1).tolist()
        return [tuple(ids[i, :first[i]].tolist()) if has[i] else None for i in range(len(self))]

    @classmethod
    def from_rows(cls, seqs: list[list[int]], masks: list[list[int]], pad_id: int = 0, device=None, *,
                  advantages: list[float] | list[list[float]] | None = None,
                  skipped_masks: list[list[int]] | None = None, rewards: list[float] | None = None,
                  group_ids: list[int] | None = None, **per_token: list[list[float]] | None) -> TokenBatch:
        """Right-pad rows of ids with their loss masks and per-token lists (each row as long as its ids, or
        shorter: the rest is 0) to one batch on ``device``. ``advantages``: per row a float (spread over the
        row's tokens; the loss mask keeps it off the prompt) or a per-token list; ``skipped_masks``: the loss
        masks of the rows counted but not forwarded; ``rewards``, ``group_ids``: per row."""
        if advantages is not None:
            per_token["advantages"] = [a if isinstance(a, list) else [float(a)] * len(ids)
                                       for a, ids in zip(advantages, seqs)]
        if seqs:
            ids, att, lm = pad_batch(seqs, pad_id, masks, left=False, device=device)
        else:
            ids, att, lm = (torch.zeros(0, 1, dtype=d, device=device) for d in (torch.long, torch.long, torch.float32))
        T = ids.shape[1]
        extra = {k: None if v is None else torch.tensor([list(r) + [0.0] * (T - len(r)) for r in v],
                                                        dtype=torch.float32, device=ids.device).reshape(len(seqs), T)
                 for k, v in per_token.items()}
        skipped = None
        if skipped_masks:
            skipped = pad_batch(skipped_masks, 0, skipped_masks, left=False, device=device)[2]
        per_row = {k: None if v is None else torch.tensor(v, dtype=d, device=ids.device)
                   for k, v, d in (("rewards", rewards, torch.float32), ("group_ids", group_ids, torch.long))}
        return cls(ids, att, lm, **extra, **per_row, skipped_mask=skipped)

    @classmethod
    def empty(cls) -> TokenBatch:
        return cls(torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, 1),
                   rewards=torch.zeros(0))

    def rows(self, idx: list[int]) -> TokenBatch:
        """The forwarded rows ``idx``, cut to their longest sequence (right padding): a micro-batch."""
        T = int(self.attention_mask[idx].sum(dim=1).max()) if len(idx) else 1
        cut = lambda t: None if t is None else t[idx, :T]
        pick = lambda t: None if t is None else t[idx]
        return TokenBatch(cut(self.input_ids), cut(self.attention_mask), cut(self.loss_mask),
                          **{k: cut(getattr(self, k)) for k in self.PER_TOKEN},
                          **{k: pick(getattr(self, k)) for k in self.PER_ROW})

    def subset(self, rows: list[int]) -> TokenBatch:
        """The rows ``rows`` (ids over the forwarded rows, then the skipped ones): a mini-batch."""
        n = len(self)
        out = self.rows([i for i in rows if i < n])
        skipped = [i - n for i in rows if i >= n]
        if skipped:
            out.skipped_mask = self.skipped_mask[skipped]
        return out

    def to(self, device) -> TokenBatch:
        """The same rows on ``device`` (itself when they are there already)."""
        if self.input_ids.device == torch.device(device):
            return self
        move = lambda t: None if t is None else t.to(device)
        return TokenBatch(move(self.input_ids), move(self.attention_mask), move(self.loss_mask),
                          **{k: move(getattr(self, k)) for k in self.PER_TOKEN + self.PER_ROW},
                          skipped_mask=move(self.skipped_mask))
