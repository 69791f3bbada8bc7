"""Reward-model variants on a fixed pair set (docs/preference.md, "Reward model"): what a last-token
Bradley-Terry head extracts versus what the language model already knows.

    python bench/preference/exp_rm_variants.py '{"init": CKPT, "pairs": PAIRS_DIR, "lr": 3e-4, "epochs": 6, ...}'

``PAIRS_DIR`` holds ``train.jsonl`` and ``heldout.jsonl`` (e.g. ``<stage>/pairs`` written by a preference or
reward_model stage). Prints first the baseline -- how often ``init``'s own summed log-likelihood ranks the
held-out chosen above the rejected -- then held-out pair accuracy of the RM after every epoch.

Variants (JSON keys, all off by default):
  extra_layers N   append N fresh decoder layers (output projections zeroed: the network is unchanged at start)
  freeze_base 1    train only the new layers and the head
  lm_coef c        + c * NLL of chosen through the tied LM head (the GRM regulariser, Yang et al. 2024)
  prefix_coef c    + c * Bradley-Terry on aligned prefixes after the first differing token (dense pairs)
  distil_coef c    + c * MSE of the score at every completion token to the running sum of init's log-probs
  labels DIR       train pointwise instead: binary cross-entropy of the last-token score on every judged
                   sample in DIR/train_labels.jsonl (written by sample_labels.py; an outcome reward model
                   in the sense of Cobbe et al. 2021); held-out pair accuracy is measured as before
  token_level 1    with labels: the loss at every completion token, not just the last (Cobbe et al.'s
                   token-level verifier: each prefix predicts whether the finished sample will pass)
"""
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("THREADS", "2")))
from rlvr.config.model import ModelConfig
from rlvr.data.preference import as_pairs, encode_pair, load_preference_jsonl
from rlvr.models.heads import last_token_index, sequence_classifier_from_causal
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.logprobs import position_ids_from_mask, token_logprobs
from rlvr.data.collate import pad_batch
from rlvr.data.order import data_order

kw = json.loads(sys.argv[1])
INIT, PAIRS = kw["init"], kw["pairs"]
LR, EPOCHS, BS = kw.get("lr", 3e-4), kw.get("epochs", 6), kw.get("bs", 32)
EXTRA, LM, PREFIX, DISTIL = (kw.get(k, 0) for k in ("extra_layers", "lm_coef", "prefix_coef", "distil_coef"))
torch.manual_seed(0)
policy, tok = load_model_and_tokenizer(ModelConfig(path=INIT), INIT)
policy.eval()
train = [encode_pair(tok, p, 256) for p in as_pairs(load_preference_jsonl(PAIRS + "/train.jsonl"), "rm")]
held = [encode_pair(tok, p, 256) for p in as_pairs(load_preference_jsonl(PAIRS + "/heldout.jsonl"), "rm")]


def batch(encs):
    rows = [e.chosen_ids for e in encs] + [e.rejected_ids for e in encs]
    masks = [e.chosen_mask for e in encs] + [e.rejected_mask for e in encs]
    return pad_batch(rows, tok.pad_token_id, masks=masks, left=False)


@torch.no_grad()
def logp_baseline() -> float:
    hits = []
    for s in range(0, len(held), 64):
        ids, att, lm = batch(held[s:s + 64])
        seq = (token_logprobs(policy, ids, att)[0] * lm).sum(1)
        n = len(held[s:s + 64])
        hits.append((seq[:n] > seq[n:]).float())
    return float(torch.cat(hits).mean())


print(f"baseline: init's summed log-likelihood ranks {logp_baseline():.3f} of {len(held)} held-out pairs", flush=True)
if EXTRA:
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    n0 = policy.config.num_hidden_layers
    policy.config.num_hidden_layers = n0 + EXTRA
    if getattr(policy.config, "layer_types", None):
        policy.config.layer_types = list(policy.config.layer_types) + [policy.config.layer_types[-1]] * EXTRA
    for i in range(EXTRA):
        layer = LlamaDecoderLayer(policy.config, n0 + i)
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
        policy.model.layers.append(layer)
rm = sequence_classifier_from_causal(policy, tok, seed=0)
if kw.get("freeze_base"):
    n_base = rm.config.num_hidden_layers - EXTRA
    for name, p in rm.named_parameters():
        if name.startswith("model.embed") or any(name.startswith(f"model.layers.{i}.") for i in range(n_base)):
            p.requires_grad_(False)


def forward(encs):
    """(r_chosen, r_rejected, auxiliary loss) for a list of encoded pairs: one padded batch of 2m rows."""
    ids, att, lm = batch(encs)
    n = len(encs)
    h = rm.model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att),
                 use_cache=False).last_hidden_state
    s = rm.score(h).squeeze(-1)
    r = s.gather(1, last_token_index(att)[:, None]).squeeze(1)
    aux = torch.zeros(())
    if LM:
        logp = torch.log_softmax(h[:n, :-1] @ rm.model.embed_tokens.weight.T, -1)
        logp = logp.gather(-1, ids[:n, 1:, None]).squeeze(-1)
        aux = aux + LM * -(logp * lm[:n, 1:]).sum() / lm[:n, 1:].sum()
    if PREFIX:
        terms = []
        for i, e in enumerate(encs):
            a, b = e.chosen_ids, e.rejected_ids
            d = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            k = torch.arange(d, max(len(a), len(b)))
            terms.append(-F.logsigmoid(s[i, k.clamp(max=len(a) - 1)] - s[n + i, k.clamp(max=len(b) - 1)]).mean())
        aux = aux + PREFIX * torch.stack(terms).mean()
    if DISTIL:
        with torch.no_grad():
            target = (token_logprobs(policy_ref, ids, att)[0] * lm).cumsum(1).clamp(min=-20)
        aux = aux + DISTIL * (((s - target) ** 2) * lm).sum() / lm.sum()
    return r[:n], r[n:], aux


LABELS = kw.get("labels")
if LABELS:
    from rlvr.data.preference import encode_unpaired

    points = [(*encode_unpaired(tok, ex, 256), float(ex.desirable))
              for ex in load_preference_jsonl(LABELS + "/train_labels.jsonl")]
    points = [(ids, y, mask) for ids, mask, y in points]
    print(f"pointwise: {len(points)} labelled samples ({sum(p[1] for p in points):.0f} desirable)", flush=True)


def pointwise_loss(idx):
    ids, att, lm = pad_batch([points[i][0] for i in idx], tok.pad_token_id,
                             masks=[points[i][2] for i in idx], left=False)
    h = rm.model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att),
                 use_cache=False).last_hidden_state
    s = rm.score(h).squeeze(-1)
    y = torch.tensor([points[i][1] for i in idx])
    if kw.get("token_level"):
        per = F.binary_cross_entropy_with_logits(s, y[:, None].expand_as(s), reduction="none")
        return (per * lm).sum() / lm.sum()
    return F.binary_cross_entropy_with_logits(s.gather(1, last_token_index(att)[:, None]).squeeze(1), y)


policy_ref = policy if DISTIL else None  # init's log-probs (extra layers, if any, are zeroed: unchanged)
opt = torch.optim.AdamW([p for p in rm.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
per_epoch = math.ceil((len(points) if LABELS else len(train)) / BS)
n_steps = EPOCHS * per_epoch
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, (s + 1) / 5) * 0.5 * (1 + math.cos(math.pi * s / n_steps)))


@torch.no_grad()
def heldout_accuracy() -> float:
    rm.eval()
    hits = [torch.gt(*forward(held[s:s + 64])[:2]).float() for s in range(0, len(held), 64)]
    rm.train()
    return float(torch.cat(hits).mean())


t0, best, acc = time.time(), 0.0, 0.0
for step in range(n_steps):
    if LABELS:
        bt, aux = pointwise_loss(data_order(len(points), 0, step, BS)), torch.zeros(())
    else:
        rc, rr, aux = forward([train[i] for i in data_order(len(train), 0, step, BS)])
        bt = -F.logsigmoid(rc - rr).mean()
    opt.zero_grad()
    (bt + aux).backward()
    torch.nn.utils.clip_grad_norm_(rm.parameters(), 1.0)
    opt.step()
    sched.step()
    if (step + 1) % per_epoch == 0:
        acc = heldout_accuracy()
        best = max(best, acc)
        print(f"epoch {(step + 1) // per_epoch}: bt {bt.item():.3f} aux {float(aux.detach()):.3f} "
              f"held-out accuracy {acc:.3f} ({time.time() - t0:.0f}s)", flush=True)
print("FINAL", json.dumps(kw), "held-out accuracy", round(acc, 4), "best", round(best, 4))
