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
    # depth 0 peers {0.25, 0.5} mean 0.375: dA0 -0.125, dB0 +0.125
    # depth 1 peers {0.5, 1} mean 0.75:     dA1 -0.25,  dB1 +0.25
    # depth 2 only A2: baseline falls back to mean G_0 = 0.375: dA2 = 1 - 0.375 = +0.625
    # normaliser: RMS of the five deviations = sqrt((2 * 0.015625 + 2 * 0.0625 + 0.390625) / 5) = sqrt(0.109375)
    r, g, t, k = flat([(0, [0.0, 0.0, 1.0]), (0, [0.0, 1.0])])
    adv = turn_discounted_credit(r, g, t, k, gamma=0.5, eps=0.0)
    rms = 0.109375 ** 0.5
    assert torch.allclose(adv, torch.tensor([-0.125, -0.25, 0.625, 0.125, 0.25]) / rms)
    assert torch.allclose(adv.pow(2).mean(), torch.tensor(1.0))  # unit RMS over the group's turns
    none = turn_discounted_credit(r, g, t, k, gamma=0.5, scale="none")
    assert torch.allclose(none, torch.tensor([-0.125, -0.25, 0.625, 0.125, 0.25]))


def test_turn_credit_shaping_moves_only_the_penalised_turn_and_earlier_ones():
    # gamma 1: A [-0.5, 1] -> G [0.5, 1]; B [0, 1] -> G [1, 1].
    # depth 0 (mean 0.75): dA0 -0.25, dB0 +0.25; depth 1: {1, 1} -> both 0 (the last turns were equal)
    # normaliser: RMS sqrt((0.0625 + 0 + 0.0625 + 0) / 4) = 0.176777 -> A0 -sqrt(2), B0 +sqrt(2)
    r, g, t, k = flat([(0, [-0.5, 1.0]), (0, [0.0, 1.0])])
    a = 2 ** 0.5
    assert torch.allclose(turn_discounted_credit(r, g, t, k, gamma=1.0, eps=0.0), torch.tensor([-a, 0.0, a, 0.0]))


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


def test_turn_credit_stays_bounded_when_first_turn_returns_tie_but_later_ones_differ():
    # gamma 1: A [0.5, 0.5] -> G [1, 0.5]; B [0, 1] -> G [1, 1]. G_0 ties at {1, 1}, depth 1 differs {0.5, 1}.
    # Deviations: depth 0 -> 0, 0; depth 1 (mean 0.75) -> A1 -0.25, B1 +0.25. The normaliser is the root mean
    # square of the group's deviations over its turns: sqrt((0 + 0.0625 + 0 + 0.0625) / 4) = 0.176777
    # -> A1 -1.414214, B1 +1.414214 (a std of G_0 alone is 0: the deviations became +-0.25 / 1e-6 = +-2.5e5)
    r, g, t, k = flat([(0, [0.5, 0.5]), (0, [0.0, 1.0])])
    adv = turn_discounted_credit(r, g, t, k, gamma=1.0)
    assert adv.abs().max() <= 10.0
    assert torch.allclose(adv, torch.tensor([0.0, -2 ** 0.5, 0.0, 2 ** 0.5]), atol=1e-4)
    # several tied groups of eight with a late difference stay bounded too
    trajs = [(grp, [0.0, 1.0] if i % 2 else [1.0, 0.0]) for grp in range(3) for i in range(8)]
    r, g, t, k = flat(trajs)
    assert turn_discounted_credit(r, g, t, k, gamma=1.0).abs().max() <= 10.0
