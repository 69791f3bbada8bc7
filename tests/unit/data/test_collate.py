"""The token batch shared by the RL, PPO and preference updates."""


def test_token_batch_pads_trims_and_spreads_row_advantages():
    """One batch type for every update: rows right-padded with 0s, micro-batches cut to their longest row,
    a per-row advantage spread over its row (the loss mask keeps it off the prompt)."""
    import torch

    from rlvr.data.collate import TokenBatch

    b = TokenBatch.from_rows([[1, 2, 3, 4], [5, 6]], [[0, 0, 1, 1], [0, 1]], pad_id=9,
                             old_logprobs=[[0, 0, -1.0, -2.0], [0, -3.0]], advantages=[0.5, [0.0, -1.0]])
    assert b.input_ids.tolist() == [[1, 2, 3, 4], [5, 6, 9, 9]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]
    assert b.old_logprobs.tolist() == [[0, 0, -1, -2], [0, -3, 0, 0]]
    assert b.advantages.tolist() == [[0.5] * 4, [0.0, -1.0, 0.0, 0.0]] and b.ref_logprobs is None
    mb = b.rows([1])
    assert mb.input_ids.tolist() == [[5, 6]] and mb.old_logprobs.tolist() == [[0, -3]] and mb.ref_logprobs is None
    assert len(TokenBatch.empty()) == 0


def test_token_batch_counts_skipped_rows_and_cuts_mini_batches_by_row_id():
    """Rows counted but not forwarded (zero advantage) ride beside the forwarded ones: row ids run over the
    forwarded rows, then the skipped ones; a subset keeps each side's rows, cut to their longest."""
    import torch

    from rlvr.data.collate import TokenBatch

    b = TokenBatch.from_rows([[1, 2, 3], [4, 5, 6, 7, 8]], [[0, 1, 1], [0, 0, 1, 1, 1]], pad_id=0,
                             old_logprobs=[[0.0, -1.0, -1.0], [0.0, 0.0, -2.0, -2.0, -2.0]], advantages=[1.0, -1.0],
                             skipped_masks=[[0, 1], [0, 0, 1, 1]], rewards=[1.0, 0.0], group_ids=[0, 3])
    assert (len(b), b.num_rows, b.lengths()) == (2, 4, [3, 5])
    assert b.prompts() == [(1,), (4, 5)]
    assert b.skipped_mask.tolist() == [[0, 1, 0, 0], [0, 0, 1, 1]]
    mini = b.subset([3, 0])                       # the second skipped row and the first forwarded one
    assert mini.input_ids.tolist() == [[1, 2, 3]] and mini.advantages.tolist() == [[1.0, 1.0, 1.0]]
    assert mini.skipped_mask.tolist() == [[0, 0, 1, 1]] and mini.num_rows == 2
    assert b.rows([1, 0]).group_ids.tolist() == [3, 0] and mini.rewards.tolist() == [1.0]
    only_skipped = b.subset([2])
    assert len(only_skipped) == 0 and only_skipped.num_rows == 1
    none = TokenBatch.from_rows([], [], skipped_masks=[[0, 1]], old_logprobs=[], advantages=[])
    assert (len(none), none.num_rows, none.old_logprobs.shape) == (0, 1, torch.Size([0, 1]))
