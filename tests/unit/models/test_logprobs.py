"""Training logprobs under bf16 autocast: logits are upcast to float32 before the division by T."""

import torch

from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import autocast_ctx, token_logprobs


def test_bf16_logits_are_upcast_before_the_temperature(tiny_dir):
    model, _ = load_pretrained(tiny_dir)
    with torch.no_grad():  # sharpen the logits, as a trained model's are: bf16 rounding of z / T grows with |z|
        model.lm_head.weight.mul_(40.0)
    ids = torch.tensor([[2, 20, 21, 22, 23, 24, 25, 26, 27]])
    att = torch.ones_like(ids)
    T = 0.7
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, att, T, bf16=True)
        with autocast_ctx(True):
            z = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        assert z.dtype == torch.bfloat16  # the forward really ran in bf16
        ref = torch.log_softmax(z.float() / T, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    err = float((lp[:, 1:] - ref).abs().max())
    assert err < 1e-5, f"max |logprob error| {err:.2e}: logits divided by T in bf16"
