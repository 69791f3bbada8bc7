"""Per-token reverse KL to a teacher over the whole vocabulary (on-policy distillation)."""

from __future__ import annotations

import torch
from torch import Tensor


def reverse_kl(student_logits: Tensor, teacher_logits: Tensor, loss_mask: Tensor, temperature: float = 1.0) -> Tensor:
    """``KL(π_S || π_T)`` at each position -> ``[B, T]`` (0 off ``loss_mask``)::

        KL_t = Σ_a π_S(a | y_<t) (log π_S(a | y_<t) − log π_T(a | y_<t)),   π = softmax(logits / temperature)

    ``student_logits`` carries the gradient, ``teacher_logits`` is detached; both ``[B, T, V]`` and aligned
    with ``loss_mask`` (position t predicts token t). Mode-seeking: the student is pushed off the tokens the
    teacher finds unlikely, on the prefixes the student itself reaches.
    """
    ls = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    lt = torch.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    kl = (ls.exp() * (ls - lt)).sum(dim=-1)
    return torch.where(loss_mask.to(torch.bool), kl, torch.zeros_like(kl))
