"""ARPO, StepPO, Turn-PPO credit: each against numbers worked by hand (the working in the comments)."""

import pytest
import torch

from rlvr.advantages.turn_credit import arpo_credit, outcome_targets, steppo_credit, turn_gae, turn_ppo_credit
from rlvr.config.agent import ARPOCredit, StepPOCredit, TurnPPOCredit
from rlvr.trainers.variants import CREDIT_CRITIC_TARGETS, CREDIT_ESTIMATORS, CreditInput

# one group, two trajectories of two turns: traj 0 succeeds on its last turn, traj 1 fails
R = torch.tensor([0.0, 1.0, 0.0, 0.0])
G, T = [0, 0, 0, 0], [0, 0, 1, 1]
A = 0.5 / (0.5 + 1e-6)  # GRPO: mean 0.5, population std 0.5 -> +-0.999998


def test_arpo_by_hand():
    v = [0.2, 0.8, 0.5, 0.6]
    # traj 0 (A > 0): next values [0.8, R=1] -> deltas [0.6, 0.2] -> u [0.6, 0.2] -> w = 2*[0.75, 0.25] = [1.5, 0.5]
    # traj 1 (A < 0): next values [0.6, R=0] -> deltas [0.1, -0.6] -> u = max(0, -delta) = [0, 0.6] -> w = [0, 2]
    full = arpo_credit(R, G, T, v, mix=1.0)
    assert full.tolist() == pytest.approx([1.5 * A, 0.5 * A, -0.0, -2 * A], abs=1e-6)
    half = arpo_credit(R, G, T, v, mix=0.5)  # (1 - 0.5) + 0.5 w
    assert half.tolist() == pytest.approx([1.25 * A, 0.75 * A, -0.5 * A, -1.5 * A], abs=1e-6)
    # a redistribution: each trajectory's turns sum to T_i * A_i, whatever the values
    assert float(full[:2].sum()) == pytest.approx(2 * A) and float(full[2:].sum()) == pytest.approx(-2 * A)
    # mix 0 is trajectory GRPO; flat values (no delta toward the outcome) give w = 1 too
    assert arpo_credit(R, G, T, v, mix=0.0).tolist() == pytest.approx([A, A, -A, -A], abs=1e-6)
    assert arpo_credit(R, G, T, [1.0, 1.0, 5.0, 5.0], mix=1.0)[:2].tolist() == pytest.approx([A, A], abs=1e-6)
    # the critic regresses every state on its trajectory's outcome
    assert outcome_targets(R, T).tolist() == [1.0, 1.0, 0.0, 0.0]
    # equal rewards in a group: nothing to redistribute
    assert arpo_credit(torch.zeros(4), G, T, v).tolist() == [0.0] * 4


def test_steppo_by_hand():
    before, after = [0.0, 0.5, 0.0, 0.5], [0.5, 1.0, 0.5, 0.5]
    # progress r^p: traj 0 [0.5, 0.5] -> to-go [1.0, 0.5]; traj 1 [0.5, 0.0] -> to-go [0.5, 0.0]
    # group of the 4 turns: mean 0.5, std sqrt(0.125) = 0.353553 -> step = [1.414214, 0, 0, -1.414214]
    s = 0.5 / (0.125 ** 0.5 + 1e-6)
    out = steppo_credit(R, G, T, before, after, step_weight=1.0)
    assert out.tolist() == pytest.approx([A + s, A, -A, -A - s], abs=1e-5)
    assert steppo_credit(R, G, T, before, after, step_weight=0.0).tolist() == pytest.approx([A, A, -A, -A], abs=1e-6)
    with pytest.raises(ValueError, match="no step score"):
        steppo_credit(R, G, T, [None] * 4, after)


def test_turn_ppo_by_hand():
    r, t, v = torch.tensor([0.0, 0.0, 1.0]), [7, 7, 7], [0.2, 0.5, 0.9]
    # gamma 1, lambda 0.5: delta = [0.5-0.2, 0.9-0.5, 1-0.9] = [0.3, 0.4, 0.1]
    # A2 = 0.1; A1 = 0.4 + 0.5*0.1 = 0.45; A0 = 0.3 + 0.5*0.45 = 0.525; returns = A + V
    adv, ret = turn_gae(r, t, v, gamma=1.0, lam=0.5)
    assert adv.tolist() == pytest.approx([0.525, 0.45, 0.1]) and ret.tolist() == pytest.approx([0.725, 0.95, 1.0])
    # gamma 0.9, lambda 1 is Monte Carlo: A0 = 0.9^2 * 1 - 0.2 = 0.61, A1 = 0.9 - 0.5 = 0.4, A2 = 0.1
    assert turn_gae(r, t, v, gamma=0.9, lam=1.0)[0].tolist() == pytest.approx([0.61, 0.4, 0.1])
    w = turn_ppo_credit(r, t, v, gamma=1.0, lam=0.5, scale="batch")
    assert float(w.mean()) == pytest.approx(0.0, abs=1e-6) and float(w.std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
    # two trajectories do not leak into each other: V after each last turn is 0
    both = turn_gae(torch.tensor([1.0, 0.0]), ["a", "b"], [0.25, 0.5], 1.0, 1.0)[0]
    assert both.tolist() == pytest.approx([0.75, -0.5])


def test_table_entries_read_the_credit_input():
    turns = CreditInput(groups=G, traj_ids=T, turn_index=[0, 1, 0, 1], states=["s"] * 4,
                        values=[0.2, 0.8, 0.5, 0.6], score_before=[0.0, 0.5, 0.0, 0.5], score_after=[0.5, 1.0, 0.5, 0.5])
    c = ARPOCredit(mix=1.0)
    assert CREDIT_ESTIMATORS["arpo"](c, R, turns).tolist() == pytest.approx([1.5 * A, 0.5 * A, 0.0, -2 * A], abs=1e-6)
    assert CREDIT_CRITIC_TARGETS["arpo"](c, R, turns).tolist() == [1.0, 1.0, 0.0, 0.0]
    assert CREDIT_ESTIMATORS["steppo"](StepPOCredit(step_weight=0.0), R, turns).tolist() == pytest.approx([A, A, -A, -A], abs=1e-6)
    tp = TurnPPOCredit(gamma=1.0, lam=1.0, scale="none")
    # MC: traj 0 returns [1, 1] - V [0.2, 0.8]; traj 1 returns [0, 0] - V [0.5, 0.6]
    assert CREDIT_ESTIMATORS["turn_ppo"](tp, R, turns).tolist() == pytest.approx([0.8, 0.2, -0.5, -0.6])
    assert CREDIT_CRITIC_TARGETS["turn_ppo"](tp, R, turns).tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
