"""Turn credit estimators against hand-worked numbers (advantages/credit.py)."""

import pytest
import torch

from rlvr.advantages.credit import hgpo_credit, trajectory_credit, turn_discounted_credit


def flat(trajs):
    """[(group, [turn rewards])] -> (rewards [N], group_ids, traj_ids, turn_index)."""
    r, g, t, k = [], [], [], []
    for i, (group, rewards) in enumerate(trajs):
        for j, x in enumerate(rewards):
            r.append(x), g.append(group), t.append(i), k.append(j)
    return torch.tensor(r), g, t, k


def test_trajectory_credit_gives_every_turn_its_trajectorys_grpo_advantage():
    # returns: A = 0 + 1 = 1, B = 0, C = -0.5 + 1 = 0.5; mean 0.5, population std sqrt(0.5 / 3) = 0.408248
    # -> A +1.224745, B -1.224745, C 0 on every turn; the lone trajectory of group 1 gets exactly 0
    r, g, t, _ = flat([(0, [0.0, 1.0]), (0, [0.0, 0.0, 0.0]), (0, [-0.5, 1.0]), (1, [1.0])])
    adv = trajectory_credit(r, g, t, eps=0.0)
    a = 0.5 / (0.5 / 3) ** 0.5
    assert torch.allclose(adv, torch.tensor([a, a, -a, -a, -a, 0.0, 0.0, 0.0]), atol=1e-6)
    assert adv[-1] == 0.0


def test_turn_credit_discounted_reward_to_go_against_the_same_depth():
    # gamma 0.5. A: rewards [0, 0, 1] -> G = [0.25, 0.5, 1]; B: [0, 1] -> G = [0.5, 1].
    # G_0 = {0.25, 0.5}: mean 0.375, population std 0.125.
    # depth 0 peers {0.25, 0.5} mean 0.375: A0 -0.125/0.125 = -1, B0 +1
    # depth 1 peers {0.5, 1} mean 0.75:     A1 -0.25/0.125 = -2, B1 +2
    # depth 2 only A2: baseline falls back to mean G_0 = 0.375: (1 - 0.375)/0.125 = +5
    r, g, t, k = flat([(0, [0.0, 0.0, 1.0]), (0, [0.0, 1.0])])
    adv = turn_discounted_credit(r, g, t, k, gamma=0.5, eps=0.0)
    assert torch.allclose(adv, torch.tensor([-1.0, -2.0, 5.0, 1.0, 2.0]))
    none = turn_discounted_credit(r, g, t, k, gamma=0.5, scale="none")
    assert torch.allclose(none, torch.tensor([-0.125, -0.25, 0.625, 0.125, 0.25]))


def test_turn_credit_shaping_moves_only_the_penalised_turn_and_earlier_ones():
    # gamma 1: A [-0.5, 1] -> G [0.5, 1]; B [0, 1] -> G [1, 1]. G_0 {0.5, 1}: mean 0.75, std 0.25.
    # depth 0: A0 (0.5 - 0.75)/0.25 = -1, B0 +1; depth 1: {1, 1} -> both 0 (the last turns were equal)
    r, g, t, k = flat([(0, [-0.5, 1.0]), (0, [0.0, 1.0])])
    assert torch.allclose(turn_discounted_credit(r, g, t, k, gamma=1.0, eps=0.0), torch.tensor([-1.0, 0.0, 1.0, 0.0]))


def test_hgpo_credit_adds_step_groups_of_turns_from_the_same_state():
    # gamma 1. A: states [s0, s1], rewards [0, 1] -> returns [1, 1]; B: [s0, s2], [0, 0] -> [0, 0].
    # trajectory part: A +1, B -1 (mean 0.5, std 0.5). Step groups: only s0 is shared -> A0 +1, B0 -1;
    # s1, s2 are alone -> 0. With step_weight 0.5: A [1.5, 1], B [-1.5, -1].
    r, g, t, _ = flat([(0, [0.0, 1.0]), (0, [0.0, 0.0])])
    adv = hgpo_credit(r, g, t, ["s0", "s1", "s0", "s2"], step_weight=0.5, eps=0.0)
    assert torch.allclose(adv, torch.tensor([1.5, 1.0, -1.5, -1.0]))


@pytest.mark.parametrize("estimator", ["trajectory", "turn", "hgpo"])
def test_groups_whose_returns_are_all_equal_get_exactly_zero(estimator):
    r, g, t, k = flat([(0, [0.0, 1.0]), (0, [0.0, 1.0]), (1, [0.0, 0.0, 0.0]), (1, [0.0])])
    fn = {"trajectory": lambda: trajectory_credit(r, g, t),
          "turn": lambda: turn_discounted_credit(r, g, t, k, gamma=1.0),
          "hgpo": lambda: hgpo_credit(r, g, t, ["s"] * len(g))}[estimator]
    assert torch.equal(fn(), torch.zeros(len(g)))


def test_credit_rejects_bad_input():
    r, g, t, k = flat([(0, [0.0, 1.0])])
    with pytest.raises(ValueError, match="N entries"):
        trajectory_credit(r, g[:1], t)
    with pytest.raises(ValueError, match="NaN"):
        trajectory_credit(torch.tensor([float("nan"), 1.0]), g, t)
    with pytest.raises(ValueError, match="has turns in groups 0 and 1"):
        trajectory_credit(r, [0, 1], [0, 0])
    with pytest.raises(ValueError, match="gamma"):
        turn_discounted_credit(r, g, t, k, gamma=1.5)
