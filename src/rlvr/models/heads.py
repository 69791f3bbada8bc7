"""Scalar heads on a causal LM's backbone: the reward model (one score per sequence) and the PPO
critic (one value per token).

Both are an HF ``*ForSequenceClassification`` model with ``num_labels = 1`` and ``pad_token_id`` set
(``LlamaForSequenceClassification`` for the tiny model), whose backbone weights are copied from the
policy and whose ``score`` head is new. Saved with ``save_pretrained`` they load with
``AutoModelForSequenceClassification.from_pretrained``; HF's own forward then returns the same
score as :func:`sequence_rewards` (the head applied to the hidden state of the last non-pad token).

Position conventions (glossary): for ``input_ids [B, T]`` the head output ``s[:, t]`` scores the prefix
``ids[:t+1]``. The reward of a sequence is ``s`` at its last real token. A critic value ``V[:, t]`` is
the value of the state *before* token ``t`` is generated — ``s[:, t-1]`` — so it lines up with
``logprobs[:, t] = log π(ids[t] | ids[<t])`` and with ``loss_mask``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from rlvr.errors import ModelLoadError
from rlvr.models.hf import hf_config, import_transformers
from rlvr.models.logprobs import autocast_ctx, position_ids_from_mask

RM_MARKER = "rlvr_reward_model.json"  # in a reward model's final/: marks it and names the policy it started from


def reward_model_marker(path: str | None) -> dict | None:
    """The marker a reward_model stage leaves in its output (None if ``path`` is not such an output)."""
    if path is None or not (Path(path) / RM_MARKER).exists():
        return None
    return json.loads((Path(path) / RM_MARKER).read_text())


def _is_peft(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def sequence_classifier_from_causal(causal, tokenizer, seed: int = 0):
    """A ``num_labels=1`` sequence classifier with ``causal``'s backbone weights and a fresh head.

    A LoRA-wrapped model is merged first (on a copy). The head's initialisation is seeded by ``seed``
    without touching the global RNG.
    """
    import_transformers()
    from transformers import AutoModelForSequenceClassification

    if _is_peft(causal):
        causal = copy.deepcopy(causal).merge_and_unload()
    cfg = copy.deepcopy(hf_config(causal))  # rlvr's own causal class: its config as transformers' class
    cfg.num_labels = 1
    cfg.pad_token_id = tokenizer.pad_token_id
    cfg.architectures = None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            model = AutoModelForSequenceClassification.from_config(cfg)
        except ValueError as e:
            raise ModelLoadError(f"no sequence-classification class for model type {cfg.model_type!r}: {e}") from None
    prefix = causal.base_model_prefix
    src = getattr(causal, prefix, None)
    dst = getattr(model, model.base_model_prefix, None)
    if src is None or dst is None:
        raise ModelLoadError(f"cannot find the backbone ({prefix!r}) of {type(causal).__name__}")
    dst.load_state_dict(src.state_dict())
    p = next(causal.parameters())
    return model.to(device=p.device, dtype=p.dtype)


def backbone_and_head(model):
    """``(backbone, head)`` of a sequence-classification model (peft-wrapped or not)."""
    inner = model.get_base_model() if _is_peft(model) else model
    head = getattr(inner, "score", None) or getattr(inner, "classifier", None)
    backbone = getattr(inner, inner.base_model_prefix, None)
    if head is None or backbone is None:
        raise ModelLoadError(f"{type(inner).__name__} has no scalar head ('score'/'classifier') or backbone")
    return backbone, head


def token_scores(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """Head output at every position ``[B, T]`` (float32); padding positions hold junk, mask them."""
    backbone, head = backbone_and_head(model)
    with autocast_ctx(bf16, input_ids.device.type):
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids_from_mask(attention_mask), use_cache=False).last_hidden_state
        out = head(hidden.to(_head_dtype(head)))
    return out.squeeze(-1).float()


def _head_dtype(head) -> torch.dtype:
    """The dtype the head computes in: its trained (fp32 master) weights' if any, else its weights'."""
    params = list(head.parameters())
    return next((p.dtype for p in params if p.requires_grad), params[0].dtype)


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last attended token ``[B]`` (right or left padding)."""
    pos = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(attention_mask)
    return torch.where(attention_mask.bool(), pos, torch.full_like(pos, -1)).amax(dim=1).clamp(min=0)


def sequence_rewards(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """Reward per sequence ``[B]``: the head on the hidden state of the last non-pad token."""
    s = token_scores(model, input_ids, attention_mask, bf16)
    return s.gather(1, last_token_index(attention_mask)[:, None]).squeeze(1)


def token_values(critic, input_ids: torch.Tensor, attention_mask: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """Critic values ``[B, T]``: ``V[:, t]`` = head on the prefix ``ids[:t]`` (0 at t = 0)."""
    s = token_scores(critic, input_ids, attention_mask, bf16)
    return torch.cat([torch.zeros_like(s[:, :1]), s[:, :-1]], dim=1)


def load_reward_model(path: str | Path, dtype: torch.dtype = torch.float32):
    """A frozen reward model and its tokenizer from a local folder (``AutoModelForSequenceClassification``)."""
    import_transformers()
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    p = Path(path)
    if not (p / "config.json").exists():
        raise ModelLoadError(f"reward model path {str(p)!r} is not an HF model folder (no config.json); "
                             "train one with a reward_model stage (`rlvr rm RECIPE`)")
    try:
        tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(p, local_files_only=True, dtype=dtype)
    except Exception as e:  # noqa: BLE001 - one-paragraph error
        raise ModelLoadError(f"could not load reward model from {str(p)!r}: {type(e).__name__}: {e}") from None
    if model.config.num_labels != 1:
        raise ModelLoadError(f"reward model {str(p)!r} has num_labels={model.config.num_labels}; expected 1")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model.eval()
    for prm in model.parameters():
        prm.requires_grad_(False)
    return model, tok


def add_lora_to_classifier(model, lora_cfg):
    """LoRA adapters on a sequence classifier (peft ``SEQ_CLS``: the new score head trains in full)."""
    from rlvr.models.load import add_lora

    return add_lora(model, lora_cfg, task_type="SEQ_CLS")
