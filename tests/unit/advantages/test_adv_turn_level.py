"""HGPO turn-level advantages against a hand-worked hierarchy of groups."""

import math

import pytest
import torch

from rlvr.advantages import hgpo, step_discounted_returns, turn_advantages_to_tokens

D = torch.float64

# One task group, three trajectories of three turns (states s0 -> X|Z -> Y):
#   A: s0 X Y  (return 1 on every turn)
#   B: s0 X Y  (return 0)
#   C: s0 Z Y  (return 1)
STATES = ["s0", "X", "Y", "s0", "X", "Y", "s0", "Z", "Y"]
TRAJ = ["A"] * 3 + ["B"] * 3 + ["C"] * 3
GROUP = ["task"] * 9
RETURNS = torch.tensor([1, 1, 1, 0, 0, 0, 1, 1, 1], dtype=D)
S2 = math.sqrt(2.0)


def test_hgpo_by_hand_alpha_1():
    # Turn 0 (state s0), level 0 only: {A:1, B:0, C:1}, mean 2/3, pop std sqrt(2/9) = 0.4714
    #   -> A: (1/3)/0.4714 = 0.7071, B: -(2/3)/0.4714 = -1.4142, C: 0.7071
    # Turn 1: level 0 state X = {A:1, B:0} -> ±1; level 1 (s0,X) = {A, B} -> ±1 => A 1, B -1.
    #   C at Z is alone at every level -> 0.
    # Turn 2 (state Y): level 0 {A:1, B:0, C:1} -> .7071, -1.4142, .7071
    #   level 1 (X,Y) {A, B} -> ±1 ; (Z,Y) {C} alone.  level 2 (s0,X,Y) {A, B} -> ±1.
    #   weights (k+1)^1 over available levels: A, B use k = 0,1,2 -> 1,2,3 (sum 6); C only k = 0.
    #   A: (0.7071*1 + 1*2 + 1*3)/6 = 0.9511845 ; B: (-1.4142 - 2 - 3)/6 = -1.0690356 ; C: 0.7071068
    adv = hgpo(RETURNS, GROUP, TRAJ, STATES, max_history=2, alpha=1.0, eps=0.0)
    expected = [1 / S2, 1.0, (1 / S2 + 5) / 6, -S2, -1.0, (-S2 - 5) / 6, 1 / S2, 0.0, 1 / S2]
    assert torch.allclose(adv, torch.tensor(expected, dtype=D), atol=1e-12)


def test_hgpo_alpha_0_is_uniform_and_history_0_is_state_grouping():
    # alpha 0: turn 2 of A = (0.7071 + 1 + 1)/3 = 0.9023689
    adv = hgpo(RETURNS, GROUP, TRAJ, STATES, max_history=2, alpha=0.0, eps=0.0)
    assert adv[2].item() == pytest.approx((1 / S2 + 2) / 3, abs=1e-12)
    # max_history 0: only same-state groups -> turn 2 of A is the level-0 value 0.7071
    adv = hgpo(RETURNS, GROUP, TRAJ, STATES, max_history=0, eps=0.0)
    assert adv[2].item() == pytest.approx(1 / S2, abs=1e-12)
    assert adv[1].item() == pytest.approx(1.0, abs=1e-12)


def test_hgpo_scale_none_centres_only():
    # turn 0: returns {1, 0, 1}, mean 2/3 -> [1/3, -2/3, 1/3]
    adv = hgpo(RETURNS, GROUP, TRAJ, STATES, max_history=0, scale="none")
    assert adv[0].item() == pytest.approx(1 / 3)
    assert adv[3].item() == pytest.approx(-2 / 3)


def test_hgpo_equal_returns_give_exact_zero_and_groups_do_not_mix():
    same = torch.full((9,), 0.3, dtype=D)
    assert torch.equal(hgpo(same, GROUP, TRAJ, STATES), torch.zeros(9, dtype=D))
    # two different tasks never share a group even with equal state keys
    adv = hgpo(torch.tensor([1.0, 0.0], dtype=D), ["t1", "t2"], ["a", "b"], ["s", "s"])
    assert torch.equal(adv, torch.zeros(2, dtype=D))


def test_hgpo_input_errors():
    with pytest.raises(ValueError, match="N group_ids"):
        hgpo(RETURNS, GROUP[:-1], TRAJ, STATES)
    with pytest.raises(ValueError, match="max_history"):
        hgpo(RETURNS, GROUP, TRAJ, STATES, max_history=-1)


def test_step_discounted_returns_by_hand():
    # traj a: rewards [0, 0, 1] gamma .5 -> [0.25, 0.5, 1]; traj b (interleaved): [2, 1] -> [2.5, 1]
    r = torch.tensor([0.0, 2.0, 0.0, 1.0, 1.0], dtype=D)
    out = step_discounted_returns(r, ["a", "b", "a", "b", "a"], gamma=0.5)
    assert torch.allclose(out, torch.tensor([0.25, 2.5, 0.5, 1.0, 1.0], dtype=D))


def test_turn_advantages_to_tokens():
    turn_adv = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    turn_index = torch.tensor([[-1, 0, 0, -1, 1, 1], [-1, -1, 0, 0, 0, -1]])
    out = turn_advantages_to_tokens(turn_adv, turn_index)
    assert torch.equal(out, torch.tensor([[0, 0.5, 0.5, 0, -1, -1], [0, 0, 2, 2, 2, 0]]))
    with pytest.raises(ValueError, match="beyond"):
        turn_advantages_to_tokens(turn_adv, torch.tensor([[2, 0], [0, 0]]))
