"""plan_micro_batches: the cheapest length-sorted cutting, and a cutting never changes the gradient."""

import itertools

import pytest
import torch

from rlvr.config.rl import GRPOLoss, RLStage, SamplingConfig
from rlvr.data import collate
from rlvr.data.collate import plan_micro_batches
from rlvr.models.load import load_pretrained
from rlvr.data.collate import TokenBatch
from rlvr.trainers.rl import update_minibatch


def cost(micros, lengths, overhead):
    return sum(len(m) * max(lengths[i] for i in m) + overhead for m in micros)


def brute_force(lengths, cap, overhead):
    """Try every cutting of the sorted rows into contiguous runs of at most ``cap``."""
    n, best = len(lengths), None
    order = sorted(range(n), key=lambda i: lengths[i])
    for mask in itertools.product([0, 1], repeat=n - 1):
        cuts = [0] + [i + 1 for i, b in enumerate(mask) if b] + [n]
        micros = [order[a:b] for a, b in itertools.pairwise(cuts)]
        if all(len(m) <= cap for m in micros):
            c = cost(micros, lengths, overhead)
            best = c if best is None else min(best, c)
    return best


def test_hand_worked_cutting():
    # sorted lengths 2,3,5,9,9,9 (rows 5,1,0,2,3,4). With no per-call cost every distinct length is its
    # own micro-batch: 2 + 3 + 5 + 3*9 = 37 padded tokens. With a huge per-call cost, the fewest
    # micro-batches (2, cap 4) and, among those, the least padding: [2,3] + [5,9,9,9] = 2*3 + 4*9 = 42.
    assert plan_micro_batches([5, 3, 9, 9, 9, 2], cap=4, overhead=0) == [[5], [1], [0], [2, 3, 4]]
    assert plan_micro_batches([5, 3, 9, 9, 9, 2], cap=4, overhead=10**9) == [[5, 1], [0, 2, 3, 4]]
    assert plan_micro_batches([], cap=4, overhead=0) == []


@pytest.mark.parametrize("seed", range(6))
def test_optimal_against_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 40, (9,), generator=g).tolist()
    for cap, overhead in [(3, 0), (4, 10), (9, 25), (2, 100)]:
        micros = plan_micro_batches(lengths, cap, overhead)
        assert sorted(i for m in micros for i in m) == list(range(9))
        assert all(len(m) <= cap for m in micros)
        assert cost(micros, lengths, overhead) == brute_force(lengths, cap, overhead)


def test_gradient_is_the_same_whatever_the_cutting(tiny_dir, monkeypatch):
    model, _ = load_pretrained(tiny_dir)
    lens = [3, 9, 4, 12, 5, 7]
    seqs = [[4] + [20 + (i + j) % 30 for j in range(n)] for i, n in enumerate(lens)]
    masks = [[0] + [1] * n for n in lens]
    batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] + [-1.0] * n for n in lens],
                                 advantages=[1.0, -0.5, 0.3, -1.2, 0.8, 0.1])
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=12), micro_batch_size=6)
    grads = []
    for overhead in (0, 10**9):  # one micro-batch per length vs the single padded batch
        monkeypatch.setitem(collate.SPLIT_OVERHEAD_TOKENS, "cpu", overhead)
        model.zero_grad(set_to_none=True)
        update_minibatch(model, batch, cfg, on_policy=False)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def brute_force_budget(lengths, cap, overhead, budget):
    """The cheapest contiguous cutting whose runs hold at most ``cap`` rows and ``budget`` padded tokens
    (a run of one row may exceed the budget)."""
    n, best = len(lengths), None
    order = sorted(range(n), key=lambda i: lengths[i])
    for mask in itertools.product([0, 1], repeat=n - 1):
        cuts = [0] + [i + 1 for i, b in enumerate(mask) if b] + [n]
        micros = [order[a:b] for a, b in itertools.pairwise(cuts)]
        if all(len(m) <= cap and (len(m) == 1 or len(m) * max(lengths[i] for i in m) <= budget) for m in micros):
            c = cost(micros, lengths, overhead)
            best = c if best is None else min(best, c)
    return best


def test_token_budget_hand_worked():
    # sorted lengths 2,3,5,9,9,9 (rows 5,1,0,2,3,4), huge per-call cost, cap 6. Without a budget: one
    # micro-batch. Budget 20: 9-long rows fit 20 // 9 = 2 together, so they need two calls and the
    # fewest calls is three; padded tokens tie at 42 between [2,3,5]+[9]+[9,9] and [2,3]+[5,9]+[9,9]
    # (6 + 18 + 18); the programme keeps the later cut points. A row longer than the budget goes alone.
    assert plan_micro_batches([5, 3, 9, 9, 9, 2], cap=6, overhead=10**9) == [[5, 1, 0, 2, 3, 4]]
    assert plan_micro_batches([5, 3, 9, 9, 9, 2], cap=6, overhead=10**9, budget=20) == [[5, 1], [0, 2], [3, 4]]
    assert plan_micro_batches([50, 3], cap=6, overhead=10**9, budget=20) == [[1], [0]]


@pytest.mark.parametrize("seed", range(4))
def test_token_budget_optimal_against_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 40, (9,), generator=g).tolist()
    for cap, overhead, budget in [(9, 10**6, 60), (4, 10, 45), (9, 25, 100), (3, 0, 30)]:
        micros = plan_micro_batches(lengths, cap, overhead, budget)
        assert sorted(i for m in micros for i in m) == list(range(9))
        assert all(len(m) == 1 or len(m) * max(lengths[i] for i in m) <= budget for m in micros)
        assert cost(micros, lengths, overhead) == brute_force_budget(lengths, cap, overhead, budget)


def test_gradient_is_the_same_under_a_token_budget(tiny_dir, monkeypatch):
    model, _ = load_pretrained(tiny_dir)
    lens = [3, 9, 4, 12, 5, 7]
    seqs = [[4] + [20 + (i + j) % 30 for j in range(n)] for i, n in enumerate(lens)]
    masks = [[0] + [1] * n for n in lens]
    batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] + [-1.0] * n for n in lens],
                                 advantages=[1.0, -0.5, 0.3, -1.2, 0.8, 0.1])
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=12), micro_batch_size=6)
    monkeypatch.setitem(collate.SPLIT_OVERHEAD_TOKENS, "cpu", 10**9)
    grads = []
    for budget in (None, 16):  # the single padded batch vs micro-batches of at most 16 padded tokens
        if budget is None:
            monkeypatch.delitem(collate.MICRO_ACTIVATION_BUDGET, "cpu", raising=False)
        else:
            c = model.config
            monkeypatch.setitem(collate.MICRO_ACTIVATION_BUDGET, "cpu", budget * c.hidden_size * c.num_hidden_layers)
        assert collate.micro_token_budget(model) == budget
        assert len(collate.plan_micro_batches([len(s) for s in seqs], 6, 10**9, budget)) == (1 if budget is None else 4)
        model.zero_grad(set_to_none=True)
        update_minibatch(model, batch, cfg, on_policy=False)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_dpo_gradient_is_the_same_under_a_token_budget(tiny_dir, monkeypatch):
    from rlvr.config.preference import DPOLoss, PreferenceStage
    from rlvr.trainers.preference import PairData, pair_micro_batches, paired_step

    model, _ = load_pretrained(tiny_dir)
    lens = [(3, 6), (9, 4), (5, 5), (12, 7)]
    rows = lambda n, k: ([4, 7] + [20 + (k + j) % 30 for j in range(n)], [0, 0] + [1] * n)  # noqa: E731
    data = PairData([rows(c, i) for i, (c, _) in enumerate(lens)], [rows(r, i + 9) for i, (_, r) in enumerate(lens)],
                    torch.tensor([[-20.0, -18.0], [-30.0, -12.0], [-15.0, -16.0], [-40.0, -22.0]]),
                    torch.zeros(4), torch.zeros(4), torch.ones(4), torch.zeros(4))
    stage = PreferenceStage(loss=DPOLoss(beta=0.1), batch_size=4, micro_batch_size=4)
    c = model.config
    grads = []
    for budget in (None, 32):  # one micro-batch vs at most 32 padded tokens
        if budget is None:
            monkeypatch.delitem(collate.MICRO_ACTIVATION_BUDGET, "cpu", raising=False)
        else:
            monkeypatch.setitem(collate.MICRO_ACTIVATION_BUDGET, "cpu", budget * c.hidden_size * c.num_hidden_layers)
        micros = pair_micro_batches(model, data, [0, 1, 2, 3], 4)
        assert sorted(i for m in micros for i in m) == [0, 1, 2, 3]
        if budget is not None:  # pairs 2 (7, 7 tokens a side) and 0 (5, 8) pad to 2 pairs x 2 sides x 8 = 32;
            # 1 (11, 6) and 3 (14, 9) go alone
            assert micros == [[2, 0], [1], [3]]
        model.zero_grad(set_to_none=True)
        paired_step(model, data, [0, 1, 2, 3], stage, 0, False)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


@pytest.mark.parametrize("setting, expected", [("auto", "default"), (None, None), (96, 96)])
def test_model_micro_tokens_sets_the_budget(setting, expected):
    """``model.micro_tokens`` reaches the planners as an argument, never on the model object: ``auto`` keeps the
    device's default budget, an integer replaces it, null removes it."""
    from rlvr.config.model import ModelConfig, TinyModel
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.trainers.rl import update_micro_batches

    model, _ = load_model_and_tokenizer(ModelConfig(tiny=TinyModel(size="test"), device="cpu", micro_tokens=setting))
    assert not any(k.startswith("rlvr_") for k in vars(model)), "a budget rides on the model object"
    c = model.config
    default = collate.MICRO_ACTIVATION_BUDGET["cpu"] // (c.hidden_size * c.num_hidden_layers)
    assert collate.micro_token_budget(model, setting) == (default if expected == "default" else expected)
    lengths = [40] * 8  # 320 padded tokens: one micro-batch without a budget, several under 96
    n = len(collate.plan_micro_batches(lengths, 8, 0, collate.micro_token_budget(model, setting)))
    if expected is None:
        assert n == 1
    elif expected == 96:
        assert n == 4  # two 40-token rows a micro-batch
    # the RL update's planner takes the same argument (distinct rows: no shared prompt to count once)
    seqs = [[20 + (i * 7 + j) % 40 for j in range(40)] for i in range(8)]
    batch = TokenBatch.from_rows(seqs, [[0] + [1] * 39 for _ in seqs], old_logprobs=[[0.0] * 40 for _ in seqs],
                                 advantages=[1.0] * 8)
    planned = update_micro_batches(model, batch, list(range(8)), 8, setting)
    assert sorted(i for m in planned for i in m) == list(range(8))
    if expected == 96:
        assert len(planned) >= 4 > len(update_micro_batches(model, batch, list(range(8)), 8, None))


def test_packed_budget_counts_a_groups_shared_prompt_once():
    """Group A (prompt 4; rows of 10 and 12 tokens) and B (prompt 3; 7, 8, 9): the packed forward computes
    (10 + 12 - 4) + (7 + 8 + 9 - 3 * 2) = 36 tokens, the padded batch 5 x 12 = 60. Under a budget of 40 the
    packed count keeps one micro-batch where the padded one must cut."""
    lengths, groups, shared = [10, 7, 12, 8, 9], ["A", "B", "A", "B", "B"], [4, 3, 4, 3, 3]
    assert len(plan_micro_batches(lengths, 8, 10**6, 40, groups)) > 1
    assert plan_micro_batches(lengths, 8, 10**6, 40, groups, shared) == [[1, 3, 4, 0, 2]]
    assert len(plan_micro_batches(lengths, 8, 10**6, 35, groups, shared)) > 1  # 36 > 35: cut


def test_packed_token_count_matches_a_direct_count():
    rng = torch.Generator().manual_seed(0)
    for _ in range(20):
        n = int(torch.randint(1, 12, (1,), generator=rng))
        sizes = torch.randint(1, 4, (n,), generator=rng).tolist()
        groups = [g for g, k in enumerate(sizes) for _ in range(k)]
        prompt = torch.randint(0, 5, (len(sizes),), generator=rng).tolist()
        shared = [prompt[g] for g in groups]
        lengths = [s + int(torch.randint(1, 9, (1,), generator=rng)) for s in shared]
        f = collate._packed_tokens(torch.tensor(lengths).numpy(), groups, shared)
        for j in range(1, len(groups) + 1):
            for i in range(j):
                rows = range(i, j)
                direct = sum(lengths[k] for k in rows) - sum(
                    (sum(1 for k in rows if groups[k] == g) - 1) * prompt[g] for g in {groups[k] for k in rows})
                assert int(f(torch.tensor([i]).numpy(), j)[0]) == direct, (i, j)


@pytest.mark.accel
def test_rl_update_budget_counts_the_packed_forwards_tokens(tiny_dir, monkeypatch):
    """Two groups of 4 rows (prompt 10, completions 5): 120 padded tokens, 60 packed. Under an 80-token budget
    the packed forward takes them in one micro-batch; the padded HF forward needs a cut."""
    from rlvr.accel import packed_forward
    from rlvr.trainers.rl import update_micro_batches

    model, _ = load_pretrained(tiny_dir)
    c = model.config
    monkeypatch.setitem(collate.MICRO_ACTIVATION_BUDGET, "cpu", 80 * c.hidden_size * c.num_hidden_layers)
    monkeypatch.setitem(collate.SPLIT_OVERHEAD_TOKENS, "cpu", 10**6)
    seqs = [[4 + g] * 10 + [20 + g * 4 + k] * 5 for g in range(2) for k in range(4)]
    masks = [[0] * 10 + [1] * 5 for _ in seqs]
    batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] * 15 for _ in seqs], advantages=[1.0] * 8)
    assert packed_forward.supports(model)
    assert len(update_micro_batches(model, batch, list(range(8)), 8)) == 1
    monkeypatch.setattr(packed_forward, "supports", lambda m: False)
    assert len(update_micro_batches(model, batch, list(range(8)), 8)) > 1
