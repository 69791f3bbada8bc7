"""On-policy distillation: the reverse-KL loss by hand, and the stage end to end (recipe -> final/)."""

import json
import math

import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.onpolicy import OnPolicyDistillStage
from rlvr.config.rl import SamplingConfig
from rlvr.losses.reverse_kl import reverse_kl


def test_reverse_kl_by_hand():
    # vocab of 2.  student logits [0, 0] -> π_S = (.5, .5);  teacher logits [ln 3, 0] -> π_T = (.75, .25)
    # KL(S||T) = .5 ln(.5/.75) + .5 ln(.5/.25) = .5 (ln 2 - ln 1.5) = .5 ln(4/3) = 0.143841
    s = torch.zeros(1, 2, 2, requires_grad=True)
    t = torch.tensor([[[math.log(3), 0.0], [0.0, 0.0]]])
    kl = reverse_kl(s, t, torch.tensor([[1.0, 1.0]]))
    assert torch.allclose(kl, torch.tensor([[0.5 * math.log(4 / 3), 0.0]]), atol=1e-6)
    kl.sum().backward()
    # d KL / d z_S at position 0: π_S ⊙ (log π_S - log π_T - KL) = .5 * (ln(2/3) - .1438), .5 * (ln 2 - .1438)
    g0 = 0.5 * (math.log(0.5 / 0.75) - 0.5 * math.log(4 / 3))
    assert math.isclose(float(s.grad[0, 0, 0]), g0, rel_tol=1e-5)
    assert torch.allclose(s.grad[0, 1], torch.zeros(2), atol=1e-7)  # equal distributions: no gradient
    # masked positions contribute nothing
    assert float(reverse_kl(s.detach(), t, torch.tensor([[0.0, 1.0]])).sum()) == 0.0


def test_stage_trains_towards_a_different_teacher(tiny_dir, tmp_path):
    from rlvr.models.tiny import build_tiny
    from rlvr.trainers.onpolicy_distill import train_onpolicy_distill

    teacher = tmp_path / "teacher"
    build_tiny(teacher, size="test", seed=5)  # another random init: KL > 0
    st = OnPolicyDistillStage(teacher=str(teacher), data=BuiltinArithmetic(families=["add2"], n=32),
                              sampling=SamplingConfig(group_size=2, max_new_tokens=8), max_steps=4, tasks_per_step=4,
                              save_every=0, optim={"lr": 3e-3, "warmup_steps": 0, "schedule": "constant"})
    res = train_onpolicy_distill(st, ModelConfig(path=tiny_dir), tmp_path / "run", seed=0)
    recs = [json.loads(x) for x in open(res.metrics_path) if '"distill/reverse_kl"' in x]
    assert len(recs) == 4 and recs[0]["distill/reverse_kl"] > 0
    assert recs[-1]["distill/reverse_kl"] < recs[0]["distill/reverse_kl"]


def test_recipe_accepts_the_stage_type(tmp_path):
    from rlvr.config.recipe import Recipe

    r = Recipe.model_validate({"name": "x", "model": {"tiny": {"size": "test"}},
                               "stages": [{"type": "onpolicy_distill", "teacher": "/t"}]})
    assert r.stages[0].type == "onpolicy_distill"
