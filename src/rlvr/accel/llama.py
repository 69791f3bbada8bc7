"""rlvr's own Llama-family causal LM: HF's module layout and parameter names, read from and written to HF
folders, without importing transformers' modeling code.

Why: a process that imports ``transformers.LlamaForCausalLM`` pays ~95 MB resident for modules a training
run never calls (``transformers.masking_utils`` pulls ``torch._dynamo`` and sympy, ``modeling_utils`` pulls
``torch.distributed.tensor``, the quantizers, the generation utilities, ...: measured).
rlvr never runs HF's forward on a supported model anyway: training takes the
packed forward (``rlvr.accel.packed_forward``), generation the lean decoder (``rlvr.rollout.fast_decode``),
and both read only the module tree and the config. :class:`NativeCausalLM` is that tree — ``model.embed_tokens``,
``model.layers[i].self_attn.{q,k,v,o}_proj``, ``.mlp.{gate,up,down}_proj``, the two RMSNorms, ``model.norm``,
``model.rotary_emb``, ``lm_head`` — with HF's parameter names, so a checkpoint it saves loads with
``AutoModelForCausalLM`` and the other way round, bit for bit.

Supported (:func:`native_reason` says why not otherwise, and rlvr loads the HF class): ``LlamaForCausalLM``,
``Qwen2ForCausalLM`` and ``MistralForCausalLM`` checkpoints in safetensors, SiLU MLP, RoPE of type ``default``
or ``linear``, no sliding window, no quantisation. Its ``forward`` is the packed forward over each row's real
tokens (HF's values at every real position, 0 at padding); there is no KV-cache ``generate()`` (rlvr's engines
decode). ``tests/unit/accel/test_llama.py`` checks logits and gradients against HF's class for the three
architectures and the save/load round trip both ways.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from rlvr.models.hf import hf_config  # noqa: F401 (re-exported: the own module's config as transformers')

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "MistralForCausalLM": "mistral"}
ROPE_TYPES = ("default", "linear")
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


class NativeConfig:
    """The checkpoint's ``config.json`` as attributes (every key kept, written back unchanged but ``dtype``),
    with the defaults HF's config classes fill in for the fields the model reads."""

    def __init__(self, raw: dict | None = None):
        if raw is None:  # copy / deepcopy / pickle: the state is restored after
            return
        cfg = dict(raw)
        cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
        cfg.setdefault("head_dim", None)
        cfg["head_dim"] = cfg["head_dim"] or cfg["hidden_size"] // cfg["num_attention_heads"]
        for k, v in (("rms_norm_eps", 1e-6), ("attention_bias", False), ("mlp_bias", False), ("attention_dropout", 0.0),
                     ("tie_word_embeddings", False), ("hidden_act", "silu"), ("sliding_window", None),
                     ("pad_token_id", None), ("bos_token_id", None), ("eos_token_id", None), ("use_cache", True)):
            cfg.setdefault(k, v)
        self.__dict__.update(cfg)
        self._raw = dict(raw)

    def __repr__(self) -> str:
        return f"NativeConfig({self.to_dict()})"

    @property
    def rope_parameters(self) -> dict:
        """``{"rope_type", "rope_theta", ...}`` from transformers 5's ``rope_parameters`` or the older
        ``rope_theta`` + ``rope_scaling`` fields."""
        rp = self._raw.get("rope_parameters")
        if isinstance(rp, dict) and "rope_theta" in rp:
            return {"rope_type": rp.get("rope_type", rp.get("type", "default")), **rp}
        scaling = self._raw.get("rope_scaling") or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        return {**scaling, "rope_type": kind, "rope_theta": float(self._raw.get("rope_theta", 10000.0))}

    def get(self, key: str, default=None):
        return getattr(self, key, default)

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def to_json_string(self) -> str:
        return json.dumps(self._raw, indent=2, sort_keys=True) + "\n"

    def save_pretrained(self, out: str | Path, dtype: torch.dtype | None = None) -> None:
        raw = dict(self._raw)
        if dtype is not None:
            raw["dtype"] = str(dtype).removeprefix("torch.")
            raw.pop("torch_dtype", None)
        Path(out, "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")


def native_reason(raw: dict) -> str | None:
    """None when a checkpoint with this ``config.json`` loads as :class:`NativeCausalLM`, else why not."""
    arch = (raw.get("architectures") or [None])[0]
    if arch not in ARCHITECTURES or raw.get("model_type") != ARCHITECTURES[arch]:
        return f"architecture {arch!r} / model_type {raw.get('model_type')!r} is not one of {sorted(ARCHITECTURES)}"
    if raw.get("hidden_act", "silu") != "silu":
        return f"hidden_act {raw.get('hidden_act')!r} is not 'silu'"
    if raw.get("quantization_config"):
        return "a quantised checkpoint"
    try:
        cfg = NativeConfig(raw)
    except KeyError as e:
        return f"config.json has no {e.args[0]!r}"
    kind = cfg.rope_parameters["rope_type"]
    if kind not in ROPE_TYPES:
        return f"rope type {kind!r} is not one of {list(ROPE_TYPES)}"
    if arch == "MistralForCausalLM" and cfg.sliding_window is not None:
        return "a sliding attention window"
    if "sliding_attention" in (raw.get("layer_types") or []) or (arch == "Qwen2ForCausalLM" and raw.get("use_sliding_window")):
        return "a sliding attention window"
    return None


class RMSNorm(nn.Module):
    """HF's ``LlamaRMSNorm``: ``w * (x / sqrt(mean(x²) + eps))`` in float32, cast back before ``w *``."""

    def __init__(self, size: int, eps: float, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, device=device))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from rlvr.accel.packed_fused import rms

        return rms(x, self.weight, self.variance_epsilon)


class RotaryEmbedding(nn.Module):
    """HF's rotary embedding for RoPE types ``default`` and ``linear``: ``(x, position_ids [B, N]) -> (cos, sin)
    [B, N, D]`` in x's dtype, computed in float32 as HF computes them."""

    def __init__(self, cfg: NativeConfig):
        super().__init__()
        rp = cfg.rope_parameters
        self.rope_type = rp["rope_type"]
        dim = int(cfg.head_dim * rp.get("partial_rotary_factor", 1.0))
        inv_freq = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        if self.rope_type == "linear":
            inv_freq = inv_freq / rp["factor"]
        self.attention_scaling = 1.0
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: NativeConfig, qkv_bias: bool, o_bias: bool, device=None):
        super().__init__()
        D, H, Hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        self.config, self.head_dim, self.scaling = cfg, D, D ** -0.5
        self.num_key_value_groups = H // Hkv
        self.q_proj = nn.Linear(cfg.hidden_size, H * D, bias=qkv_bias, device=device)
        self.k_proj = nn.Linear(cfg.hidden_size, Hkv * D, bias=qkv_bias, device=device)
        self.v_proj = nn.Linear(cfg.hidden_size, Hkv * D, bias=qkv_bias, device=device)
        self.o_proj = nn.Linear(H * D, cfg.hidden_size, bias=o_bias, device=device)


class MLP(nn.Module):
    def __init__(self, cfg: NativeConfig, bias: bool, device=None):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=bias, device=device)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=bias, device=device)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=bias, device=device)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: NativeConfig, kind: str, device=None):
        super().__init__()
        qkv_bias = True if kind == "qwen2" else bool(cfg.attention_bias) if kind == "llama" else False
        o_bias = bool(cfg.attention_bias) if kind == "llama" else False
        self.self_attn = Attention(cfg, qkv_bias, o_bias, device)
        self.mlp = MLP(cfg, bool(cfg.mlp_bias) if kind == "llama" else False, device)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)


class DecoderStack(nn.Module):
    def __init__(self, cfg: NativeConfig, kind: str, device=None):
        super().__init__()
        weight = None if device is None else torch.empty(cfg.vocab_size, cfg.hidden_size, device=device)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id,
                                         _weight=weight, device=device)  # (on meta: normal_ would import dynamo)
        self.layers = nn.ModuleList(DecoderLayer(cfg, kind, device) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.rotary_emb = RotaryEmbedding(cfg)


class NativeCausalLM(nn.Module):
    """A Llama / Qwen2 / Mistral causal LM with HF's module tree and parameter names (see the module doc)."""

    base_model_prefix = "model"
    main_input_name = "input_ids"
    is_rlvr_native = True

    def __init__(self, cfg: NativeConfig, generation_config: dict | None = None, device=None):
        """Parameters on ``device`` (``meta``: unallocated, to be loaded with ``load_state_dict(assign=True)``;
        else torch's default initialisation: load weights after)."""
        super().__init__()
        arch = (getattr(cfg, "architectures", None) or ["LlamaForCausalLM"])[0]
        self.config = cfg
        self.architecture = arch
        self.generation_config = SimpleNamespace(**(generation_config or {}))
        self.name_or_path = ""
        self.model = DecoderStack(cfg, ARCHITECTURES[arch], device)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, device=device)
        self.tie_weights()

    # ------------------------------------------------------------------ HF-compatible surface
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def can_generate(self) -> bool:
        return False

    def generate(self, *args, **kwargs):
        raise NotImplementedError("NativeCausalLM has no generate(): sample with rlvr's engines "
                                  "(rlvr.rollout.hf_engine.HFEngine), or load the HF class (model.implementation: hf)")

    def gradient_checkpointing_enable(self, *args, **kwargs):
        raise NotImplementedError("NativeCausalLM does not checkpoint activations: load the HF class "
                                  "(model.implementation: hf) for model.gradient_checkpointing")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, use_cache: bool | None = None,
                output_hidden_states: bool = False, past_key_values=None, labels=None, **_):
        """HF's ``forward`` for a batch without a KV cache: ``.logits [B, T, V]`` at every real position (HF's
        values; 0 at padding), ``.hidden_states`` (the last one, final-normed, at ``[-1]``) when asked.
        Positions: ``position_ids`` at the real tokens when given, else 0 .. len-1 per row; each real token
        attends to the real tokens before it in its row."""
        from rlvr.accel import packed_forward as pf

        if past_key_values is not None or labels is not None or use_cache or _.get("cache") is not None or \
                pf.unsupported_reason(self) is not None:  # a KV cache, a loss, hooks: transformers' forward
            return self.hf_twin()(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  use_cache=use_cache, output_hidden_states=output_hidden_states,
                                  past_key_values=past_key_values, labels=labels, **_)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        pk = pf.Packing(input_ids, attention_mask, share=False)
        if position_ids is not None:
            pk.pos = position_ids.reshape(-1)[pk.slot_flat]
        h = pf.packed_hidden(self, pk)
        B, T = input_ids.shape
        z = self.lm_head(h)
        logits = z.new_zeros(B * T, z.shape[-1]).index_copy_(0, pk.slot_flat, z)
        out = SimpleNamespace(logits=logits.view(B, T, -1), loss=None, past_key_values=None, hidden_states=None)
        if output_hidden_states:
            last = h.new_zeros(B * T, h.shape[-1]).index_copy_(0, pk.slot_flat, h).view(B, T, -1)
            out.hidden_states = (last,)
        return out

    def hf_twin(self):
        """transformers' class for this config holding this model's own modules (embedding, projections, norms,
        head: the same objects, so the same Parameters and hooks): its forward with a KV cache, a loss or forward
        hooks, where rlvr's packed forward does not apply. Built on first use (it imports transformers' model
        code) and kept."""
        twin = self.__dict__.get("_hf_twin")
        if twin is not None:
            return twin
        from rlvr.models.hf import import_transformers

        transformers = import_transformers()
        hf_cfg = hf_config(self)
        with torch.device("meta"):
            twin = getattr(transformers, self.architecture)(hf_cfg)
        twin.model.embed_tokens, twin.model.norm, twin.lm_head = self.model.embed_tokens, self.model.norm, self.lm_head
        for mine, theirs in zip(self.model.layers, twin.model.layers):
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                setattr(theirs.self_attn, name, getattr(mine.self_attn, name))
            for name in ("gate_proj", "up_proj", "down_proj"):
                setattr(theirs.mlp, name, getattr(mine.mlp, name))
            theirs.input_layernorm, theirs.post_attention_layernorm = mine.input_layernorm, mine.post_attention_layernorm
        twin.model.rotary_emb = type(twin.model.rotary_emb)(hf_cfg).to(self.device)
        for layer in twin.model.layers:  # no dropout, as the packed forward (rlvr loads the HF class for train_dropout)
            layer.self_attn.attention_dropout = 0.0
        twin.train(self.training)
        self.__dict__["_hf_twin"] = twin  # not a submodule: no second copy in parameters() / state_dict()
        return twin

    def train(self, mode: bool = True):
        super().train(mode)
        twin = self.__dict__.get("_hf_twin")
        if twin is not None:
            twin.train(mode)
        return self

    # ------------------------------------------------------------------ files
    def save_pretrained(self, out: str | Path, safe_serialization: bool = True, **_) -> None:
        from safetensors.torch import save_file

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(out, self.dtype)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
        gen = vars(self.generation_config)
        if gen:
            (out / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> NativeCausalLM:
        """Load an HF folder (config.json + safetensors, one file or an index of shards)."""
        from safetensors.torch import load_file

        p = Path(path)
        raw = json.loads((p / "config.json").read_text())
        why = native_reason(raw)
        if why:
            raise ValueError(f"{p}: {why}")
        gen_file = p / "generation_config.json"
        gen = json.loads(gen_file.read_text()) if gen_file.exists() else {}
        model = cls(NativeConfig(raw), gen, device="meta")
        if (p / WEIGHTS).exists():
            files = [p / WEIGHTS]
        elif (p / WEIGHTS_INDEX).exists():
            files = sorted({p / f for f in json.loads((p / WEIGHTS_INDEX).read_text())["weight_map"].values()})
        else:
            raise FileNotFoundError(f"{p}: no {WEIGHTS} nor {WEIGHTS_INDEX} (rlvr's own model reads safetensors only)")
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        model.assign_weights({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}, str(p))
        model.name_or_path = str(p)
        return model

    def assign_weights(self, state: dict[str, torch.Tensor], where: str) -> None:
        """Take ``state``'s tensors as the parameters (HF names; ``lm_head.weight`` optional when tied); a
        missing or unexpected name is an error naming ``where``."""
        state = dict(state)
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        expected = {k for k in self.state_dict() if not (self.config.tie_word_embeddings and k == "lm_head.weight")}
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        if missing or unexpected:
            raise ValueError(f"{where}: weights do not match the {self.architecture} layout: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
        self.load_state_dict(state, strict=False, assign=True)
        self.tie_weights()
        self.model.rotary_emb = RotaryEmbedding(self.config)  # (its buffer was built on the meta device)


def from_hf(hf_model) -> NativeCausalLM:
    """A :class:`NativeCausalLM` holding copies of an HF model's weights (tests, conversions)."""
    raw = hf_model.config.to_dict()
    raw["architectures"] = [type(hf_model).__name__]
    why = native_reason(raw)
    if why:
        raise ValueError(f"{type(hf_model).__name__}: {why}")
    model = NativeCausalLM(NativeConfig(raw), device="meta")
    model.assign_weights({k: v.detach().clone() for k, v in hf_model.state_dict().items()}, type(hf_model).__name__)
    return model.to(hf_model.device)


def load(path: Path, dtype: torch.dtype, implementation: str):
    """The ``causal_lm`` hook (``rlvr.hooks``): the checkpoint in ``path`` as a :class:`NativeCausalLM`, or None
    (transformers' class) where this module does not apply; ``implementation: native`` there is an error."""
    from rlvr.errors import ModelLoadError

    why = native_reason(json.loads((path / "config.json").read_text()))
    if why is None and not any((path / f).exists() for f in ("model.safetensors", "model.safetensors.index.json")):
        why = "no safetensors weights"
    if why is None:
        return NativeCausalLM.from_pretrained(path, dtype)
    if implementation == "native":
        raise ModelLoadError(f"model path {str(path)!r}: model.implementation is native but {why}")
    return None


def is_native(model) -> bool:
    return bool(getattr(model, "is_rlvr_native", False))

