"""TextArena games in the closed loop on the tiny model: observation tokens get no gradient, a raising game is
``infra`` (never a crash), ``rlvr eval --tasks textarena:ID:N`` runs, and a bad id in a recipe is named with
its field before any work."""

import json
import os
import sys

import pytest
import torch

ta = pytest.importorskip("textarena")

from rlvr.config.agent import AgentLoopConfig  # noqa: E402
from rlvr.config.data import TextArenaTasks  # noqa: E402
from rlvr.data.sources import load_task_source  # noqa: E402
from rlvr.models.tiny import build_tiny  # noqa: E402
from rlvr.rollout.hf_engine import HFEngine  # noqa: E402
from rlvr.rollout.multiturn import MultiTurnCollector  # noqa: E402
from rlvr.trainers.agent import token_advantages  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "envs"))
from test_env_textarena import test_games  # noqa: E402,F401 - the fixture registering the test games
from test_multiturn import _loss_and_logit_grads  # noqa: E402

LOOP = AgentLoopConfig(max_turns=8, max_new_tokens=8, max_total_tokens=400)
GUESS = {"env": "GuessTheNumber-v0", "kwargs": {"min_number": 1, "max_number": 50, "max_turns": 6},
         "prompt": "Guess 1-50 as [n]."}


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny(size="test", seed=3)
    return model.eval(), tok


def test_observation_tokens_get_zero_gradient(tiny):
    model, tok = tiny
    tasks = load_task_source(TextArenaTasks(**GUESS, n=2))
    trajs = MultiTurnCollector(HFEngine(model, tok), tok, LOOP).collect(tasks, 2, temperature=1.0, seed=1)
    assert all(t.valid for t in trajs)
    tr = max(trajs, key=lambda t: len(t.turns))
    assert len(tr.turns) >= 2  # a game message between two turns (an untrained policy's moves are invalid)
    obs = tok.decode(tr.ids[tr.turns[0].end:tr.turns[1].start])
    assert "invalid move" in obs or "number is" in obs
    assert "Guess 1-50" not in obs  # only the new messages, never the introduction again
    model.train()
    try:
        adv = token_advantages(tr, [1.0 + k for k in range(len(tr.turns))])[0]
        g = _loss_and_logit_grads(model, tok, [tr.ids], [tr.loss_mask], [adv], [tr.old_logprobs])
    finally:
        model.eval()
    predicts_env = [t for t in range(len(tr.ids) - 1) if tr.loss_mask[t + 1] == 0]
    predicts_policy = [t for t in range(len(tr.ids) - 1) if tr.loss_mask[t + 1] == 1]
    assert predicts_env and torch.count_nonzero(g[0, predicts_env]) == 0
    assert all(torch.count_nonzero(g[0, t]) > 0 for t in predicts_policy)


def test_a_raising_game_ends_its_trajectory_as_infra_and_the_batch_goes_on(tiny, test_games):  # noqa: F811
    model, tok = tiny
    broken = load_task_source(TextArenaTasks(env="RlvrBroken-v0", n=1))
    fine = load_task_source(TextArenaTasks(env="RlvrDraw-v0", n=1))
    trajs = MultiTurnCollector(HFEngine(model, tok), tok, LOOP).collect(broken + fine, 2, temperature=1.0)
    assert [t.end for t in trajs[:2]] == ["infra", "infra"] and "the game broke" in trajs[0].error
    assert all(t.valid and t.verdict.outcome in ("pass", "wrong") for t in trajs[2:])


def test_eval_runs_textarena_games_by_id(tiny_dir, tmp_path, rlvr_cli):
    out = tmp_path / "e.json"
    code, _, err = rlvr_cli("eval", "--model", tiny_dir, "--tasks", "textarena:GuessTheNumber-v0:3",
                            "--max-new-tokens", "4", "--max-turns", "3", "--out", out)
    assert code in (0, None), err
    res = json.loads(out.read_text())
    assert res["n_tasks"] == 3 and set(res["by_family"]) == {"GuessTheNumber-v0"}
    code, _, err = rlvr_cli("eval", "--model", tiny_dir, "--tasks", "textarena:TicTacToe-v0:3")
    assert code not in (0, None) and "single-player" in err and "Traceback" not in err


def test_a_bad_env_id_in_a_recipe_is_named_with_its_field(tmp_path, rlvr_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: t\nmodel: {tiny: {size: test}}\nstages:\n  - type: sft\n    name: sft\n"
                      "    data: {type: textarena, env: NoSuchGame-v0, n: 4}\n    max_steps: 1\n")
    code, out, err = rlvr_cli("validate", recipe)
    assert code not in (0, None) and "Traceback" not in out + err
    assert "stages.0.data" in out + err and "unknown env 'NoSuchGame-v0'" in out + err
