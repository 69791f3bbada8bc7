"""Sequence packing for SFT: several examples per row, each attending only to itself.

``pack_rows`` groups examples into rows of at most ``capacity`` tokens (first-fit decreasing);
``packed_batch`` lays each row's examples end to end with ``position_ids`` restarting at 0 at every
example. Given ``position_ids`` and ``attention_mask=None``, transformers (>= 4.5x,
``masking_utils.find_packed_sequence_indices``) reads a new sequence wherever the position does not
advance by exactly 1 and builds a block-diagonal causal mask, so a token sees only the earlier tokens of
its own example: the logits of a packed row are those of each example forwarded alone
(``tests/unit/trainers/test_sft_packing.py``). The padding at a row's end gets positions ``0, 0, ...``
(each pad its own one-token sequence) and a zero loss mask; so does each example's first token, which
unpacked is never a label either (with ``shift``, the previous example's last logit would score it).
"""

from __future__ import annotations

import torch


def pack_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices into ``lengths`` grouped into rows whose lengths sum to at most ``capacity`` (an item longer
    than ``capacity`` gets a row of its own). First-fit decreasing (ties by index, so deterministic);
    rows come out longest-first, items in a row longest-first."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    used: list[int] = []
    for i in order:
        n = lengths[i]
        for r, u in enumerate(used):
            if u + n <= capacity:
                rows[r].append(i)
                used[r] += n
                break
        else:
            rows.append([i])
            used.append(n)
    return rows


def packed_batch(rows: list[list[tuple[list[int], list[int]]]], pad_id: int, device=None):
    """``(input_ids, position_ids, loss_mask)`` ``[R, T]`` for ``rows`` of ``(ids, loss_mask)`` examples laid
    end to end (T: the longest row); positions restart at 0 at each example, padding gets position 0 and
    loss mask 0. Forward with ``attention_mask=None`` so the model builds the per-example mask."""
    T = max(sum(len(ids) for ids, _ in row) for row in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), T), dtype=torch.long)
    lm = torch.zeros((len(rows), T), dtype=torch.float32)
    for r, row in enumerate(rows):
        o = 0
        for toks, mask in row:
            n = len(toks)
            ids[r, o:o + n] = torch.tensor(toks, dtype=torch.long)
            pos[r, o:o + n] = torch.arange(n)
            lm[r, o + 1:o + n] = torch.tensor(mask[1:], dtype=torch.float32)  # an example's first token is
            o += n                                                          # no label (as unpacked)
    if device is not None and str(device) != "cpu":
        ids, pos, lm = ids.to(device), pos.to(device), lm.to(device)
    return ids, pos, lm
