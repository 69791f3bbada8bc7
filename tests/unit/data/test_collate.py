"""The token batch shared by the RL, PPO and preference updates."""


def test_token_batch_pads_trims_and_spreads_row_advantages():
    """One batch type for every update: rows right-padded with 0s, micro-batches cut to their longest row,
    a per-row advantage spread over its row (the loss mask keeps it off the prompt)."""
    import torch

    from rlvr.data.collate import TokenBatch, TrainBatch

    tb = TrainBatch(input_ids=[[1, 2, 3, 4], [5, 6]], loss_mask=[[0, 0, 1, 1], [0, 1]],
                    old_logprobs=[[0, 0, -1.0, -2.0], [0, -3.0]], ref_logprobs=None, advantages=[0.5, [0.0, -1.0]])
    b = tb.tokens(pad_id=9)
    assert b.input_ids.tolist() == [[1, 2, 3, 4], [5, 6, 9, 9]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]
    assert b.old_logprobs.tolist() == [[0, 0, -1, -2], [0, -3, 0, 0]]
    assert b.advantages.tolist() == [[0.5] * 4, [0.0, -1.0, 0.0, 0.0]] and b.ref_logprobs is None
    mb = b.rows([1])
    assert mb.input_ids.tolist() == [[5, 6]] and mb.old_logprobs.tolist() == [[0, -3]] and mb.ref_logprobs is None
    assert len(TokenBatch.empty()) == 0
