"""``model.autocast_bf16: train``: the training forwards run under bf16 autocast, generation in float32.

The numerics the RL and preference losses rely on hold in bf16 as in float32 because every logprob the
loss compares comes from the same (bf16, packed) path: KL to an identical reference is exactly 0, the
on-policy ratio is exactly 1, DPO's first loss is exactly log 2; the loss is within bf16 rounding of the
float32 one.
"""

import json
import math

import pytest
import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.preference import DPOLoss, PreferenceStage
from rlvr.config.rl import KLConfig, RLStage, SamplingConfig
from rlvr.data.collate import TokenBatch
from rlvr.models.load import load_pretrained
from rlvr.trainers import micro_loss, rl, update
from rlvr.verifiers.base import Verdict


def test_train_mode_trains_in_bf16_and_decodes_in_float32():
    cfg = ModelConfig(autocast_bf16="train")
    assert (cfg.train_bf16, cfg.decode_bf16) == (True, False)
    assert (ModelConfig(autocast_bf16=True).train_bf16, ModelConfig(autocast_bf16=True).decode_bf16) == (True, True)
    assert (ModelConfig().train_bf16, ModelConfig().decode_bf16) == (False, False)
    with pytest.raises(ValueError, match="autocast_bf16"):
        ModelConfig(autocast_bf16="decode")


def parity_judge(tasks, completions):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong")
            for c in completions]


def spy_precision(monkeypatch) -> dict:
    """Record the ``bf16`` flag the RL trainer builds its engine with and passes to every training forward."""
    seen = {"engine": [], "forward": []}
    inner_engine, inner_lp = rl.LOCAL.engine, update.token_logprobs

    def engine(model, tok, bf16=False):
        seen["engine"].append(bf16)
        return inner_engine(model, tok, bf16=bf16)

    def token_logprobs(*args, **kw):
        seen["forward"].append(kw.get("bf16"))
        return inner_lp(*args, **kw)
    monkeypatch.setattr(rl.LOCAL, "engine", engine)
    monkeypatch.setattr(update, "token_logprobs", token_logprobs)      # reference and old-logprob passes
    monkeypatch.setattr(micro_loss, "token_logprobs", token_logprobs)  # the update's forward
    return seen


def one_step_grpo() -> RLStage:
    return RLStage(sampling=SamplingConfig(group_size=4, max_new_tokens=8), micro_batch_size=3,
                   kl=KLConfig(beta=0.1), max_steps=1, tasks_per_step=4, save_every=0,
                   data=BuiltinArithmetic(families=["add2"], n=16))


def test_grpo_stage_in_train_mode_has_kl_exactly_zero_at_the_first_step(tiny_dir, tmp_path, monkeypatch):
    """The policy is the reference at step 1: KL is exactly 0 (reference logprobs and the training forward
    both bf16, same micro-batches), and the ratio is 1 (on-policy: the forward itself). The engine was
    built for float32 decoding and every training forward ran under autocast."""
    seen = spy_precision(monkeypatch)
    st = one_step_grpo()
    res = rl.train_rl(st, ModelConfig(path=tiny_dir, autocast_bf16="train"), tmp_path, judge=parity_judge)
    with open(res.metrics_path) as f:
        rec = [json.loads(x) for x in f][-1]
    assert rec["train/sequences"] > 0
    assert rec["kl/ref"] == 0.0, rec["kl/ref"]
    assert (rec["ratio/min"], rec["ratio/max"]) == (1.0, 1.0)
    assert seen["engine"] == [False]
    assert seen["forward"] and all(b is True for b in seen["forward"]), seen["forward"]


def grpo_loss(tiny_dir, bf16: bool, ref_noise: float = 0.0) -> tuple[float, float]:
    """(loss, KL metric) of one on-policy GRPO update with β = 0.1 against a copy of the policy (its weights
    moved by seeded noise of scale ``ref_noise``)."""
    model, _ = load_pretrained(tiny_dir)
    ref, _ = load_pretrained(tiny_dir)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(ref_noise * torch.randn(p.shape, generator=gen))
    g = torch.Generator().manual_seed(0)
    seqs, masks, adv = [], [], []
    for p in ([4, 20, 21, 22], [4, 23, 24]):
        for _ in range(4):
            n = int(torch.randint(2, 9, (1,), generator=g))
            seqs.append(p + torch.randint(30, 60, (n,), generator=g).tolist())
            masks.append([0] * len(p) + [1] * n)
            adv.append(float(torch.randn(1, generator=g)))
    batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] * len(s) for s in seqs], advantages=adv)
    st = RLStage(sampling=SamplingConfig(group_size=4, max_new_tokens=8), micro_batch_size=8, kl=KLConfig(beta=0.1))
    batch.ref_logprobs = rl.reference_logprobs(ref, model, batch, 1.0, 8, bf16)
    met = rl.update_minibatch(model, batch, st, on_policy=True, bf16=bf16)
    return met["train/loss"], met["kl/ref"]


def test_grpo_loss_in_bf16_is_within_rounding_of_float32(tiny_dir):
    loss32, kl32 = grpo_loss(tiny_dir, False)
    loss16, kl16 = grpo_loss(tiny_dir, True)
    assert kl32 == 0.0 and kl16 == 0.0
    # on-policy, KL 0: the loss is -Σ A·ratio / tokens with ratio exactly 1 in both precisions
    assert loss16 == pytest.approx(loss32, abs=1e-6)
    # a reference that differs: the KL term (β = 0.1) moves the loss; bf16 stays within its rounding
    loss32, kl32 = grpo_loss(tiny_dir, False, ref_noise=0.05)
    loss16, kl16 = grpo_loss(tiny_dir, True, ref_noise=0.05)
    assert kl32 > 1e-3 and loss32 != pytest.approx(grpo_loss(tiny_dir, False)[0], abs=1e-4)
    assert kl16 == pytest.approx(kl32, rel=0.05) and loss16 == pytest.approx(loss32, rel=0.02, abs=1e-3)


def test_dpo_first_loss_is_log_two_in_bf16_as_in_float32(tiny_dir, tmp_path):
    """The reference cache and the step share the bf16 packed path: the first loss is log 2 (policy =
    reference) to float32 rounding of the loss itself, in bf16 as in float32."""
    from rlvr.data.arithmetic import generate
    from rlvr.data.preference import as_pairs, records_from_rows
    from rlvr.trainers import preference

    model, tok = load_pretrained(tiny_dir)
    rows = [{"prompt": t.prompt, "chosen": t.gold["answer"] + " ok", "rejected": "no " + t.gold["answer"]}
            for t in generate(["add2"], 6, seed=0)]
    data = preference.encode_pairs(tok, as_pairs(records_from_rows(rows, "t"), "dpo"), 64)
    stage = PreferenceStage(loss=DPOLoss(beta=0.1), batch_size=6, micro_batch_size=6)
    losses = {}
    for bf16 in (False, True):
        preference.fill_reference(model, data, None, tmp_path, 6, tok.pad_token_id, bf16)
        model.zero_grad(set_to_none=True)
        losses[bf16] = preference.paired_step(model, data, list(range(6)), stage, tok.pad_token_id, bf16)["train/loss"]
    assert losses[True] == pytest.approx(math.log(2), abs=1e-6), losses
    assert losses[False] == pytest.approx(math.log(2), abs=1e-6), losses


@pytest.mark.parametrize("units,threshold,decode_from,want", [
    ("amx", 1, 10 ** 12, (True, False)), ("avx512", 1, 10 ** 12, (True, False)), (None, 1, 1, (False, False)),
    ("amx", 10 ** 12, 10 ** 12, (False, False)), ("avx512", 1, 1, (True, True)), ("amx", 10 ** 12, 1, (False, False))],
    ids=["amx-large", "avx512-bf16-large", "no-bf16-units", "amx-small", "decode-threshold", "decode-needs-train"])
def test_auto_trains_in_bf16_on_a_cpu_with_bf16_units_from_the_size_threshold(tiny_dir, tmp_path, monkeypatch, units,
                                                                                threshold, decode_from, want):
    """``autocast_bf16: auto`` is decided when the stage loads its model: bf16 training forwards on a CPU with bf16
    units (AMX tiles or avx512_bf16) and a model of at least AUTO_BF16_PARAMS parameters, float32 otherwise;
    generation in bf16 too from AUTO_BF16_DECODE_PARAMS (never without bf16 training); every training forward
    and the engine follow the decision. Read before a model is loaded, it refuses to guess."""
    import rlvr.config.model as cm
    monkeypatch.setattr(cm, "cpu_bf16_units", lambda: units)
    monkeypatch.setattr(cm, "AUTO_BF16_PARAMS", threshold)
    monkeypatch.setattr(cm, "AUTO_BF16_DECODE_PARAMS", decode_from)
    for prop in ("train_bf16", "decode_bf16"):
        with pytest.raises(RuntimeError, match="decided when the model is loaded"):
            _ = getattr(ModelConfig(path=tiny_dir, autocast_bf16="auto"), prop)
    seen = spy_precision(monkeypatch)
    st = one_step_grpo()
    cfg = ModelConfig(path=tiny_dir, autocast_bf16="auto")
    rl.train_rl(st, cfg, tmp_path, judge=parity_judge)
    assert (cfg.train_bf16, cfg.decode_bf16) == want
    assert seen["engine"] == [want[1]]
    assert seen["forward"] and all(b is want[0] for b in seen["forward"]), seen["forward"]


@pytest.mark.parametrize("flags,want", [("fpu avx512f avx512_bf16 amx_bf16 amx_tile", "amx"),
                                        ("fpu avx512f avx512_bf16 avx512_vnni", "avx512"),
                                        ("fpu avx2 avx512f", None), ("fpu avx512_bf16x", None)],
                         ids=["amx", "avx512-bf16-only", "neither", "no-substring-match"])
def test_cpu_bf16_units_reads_the_amx_and_avx512_bf16_flags(tmp_path, flags, want):
    """A CPU with avx512_bf16 but no AMX (AMD Zen 4/5) has bf16 units too: auto must not leave it in float32."""
    from rlvr.config.model import cpu_bf16_units
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: X\nflags\t\t: {flags}\n\n")
    assert cpu_bf16_units(str(info)) == want
    assert cpu_bf16_units(str(tmp_path / "missing")) is None


def test_the_bf16_reference_stores_its_projections_in_bf16_and_gives_the_same_logprobs(tiny_dir):
    """frozen_reference(bf16=True): every projection weight of the copy in bf16 (embeddings and norms in
    float32), its reference logprobs under autocast equal the float32 copy's bit for bit, and it holds
    fewer bytes."""
    from rlvr.trainers.common import frozen_reference
    model, _ = load_pretrained(tiny_dir)
    full, half = frozen_reference(model, True), frozen_reference(model, True, bf16=True)
    tied = half.lm_head.weight is half.model.embed_tokens.weight  # a tied head stays with the embeddings
    lin = [n for n, m in half.named_modules() if type(m) is torch.nn.Linear and not (tied and n == "lm_head")]
    assert len(lin) >= 7 and all(half.get_submodule(n).weight.dtype == torch.bfloat16 for n in lin)
    assert half.model.embed_tokens.weight.dtype == torch.float32
    assert half.model.layers[0].input_layernorm.weight.dtype == torch.float32
    nbytes = lambda m: sum(p.numel() * p.element_size() for p in m.parameters())
    assert nbytes(half) < 0.7 * nbytes(full)
    seqs = [[4, 20, 21, 22, 30, 31], [4, 23, 24, 40], [4, 20, 21, 22, 33]]
    batch = TokenBatch.from_rows(seqs, [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0, 1]],
                                 old_logprobs=[[0.0] * len(s) for s in seqs], advantages=[1.0, -1.0, 0.5])
    a = rl.reference_logprobs(full, model, batch, 0.9, 8, True)
    b = rl.reference_logprobs(half, model, batch, 0.9, 8, True)
    assert torch.equal(a, b) and bool(a.any())
