"""TextArena games behind the environment protocol: new messages only, the game's rules and outcome, replay
from the seed, each game's own random state, refusals when the task source is read, no game named in src/."""

import random
import re
import threading
import time
from pathlib import Path

import pytest

ta = pytest.importorskip("textarena")

from rlvr.config.data import TextArenaTasks  # noqa: E402
from rlvr.data.sources import load_task_source  # noqa: E402
from rlvr.envs.base import EnvLimits  # noqa: E402
from rlvr.envs.registry import make_env  # noqa: E402
from rlvr.envs.textarena import TextArenaEnv, play_teacher  # noqa: E402
from rlvr.errors import DataError  # noqa: E402
from rlvr.verifiers.env import EnvPredicateVerifier  # noqa: E402

SRC = Path(__file__).resolve().parents[3] / "src"
GUESS = {"env": "GuessTheNumber-v0", "kwargs": {"min_number": 1, "max_number": 50, "max_turns": 6}}


class DrawingGame(ta.Env):
    """A single-player test game that shows a fresh random draw every turn, raises at the turn ``raise_at``
    and sleeps ``sleep_s`` a turn."""

    def __init__(self, turns: int = 5, raise_at: int = 0, sleep_s: float = 0.0):
        self.turns, self.raise_at, self.sleep_s = turns, raise_at, sleep_s

    def reset(self, num_players, seed=None):
        self.state = ta.SinglePlayerState(num_players=num_players, seed=seed, max_turns=self.turns)
        self.state.reset(game_state={}, player_prompt_function=lambda player_id, game_state: "Say anything.")

    def step(self, action):
        self.state.add_observation(from_id=0, to_id=-1, message=action,
                                   observation_type=ta.ObservationType.PLAYER_ACTION)
        if self.raise_at and self.state.turn + 1 >= self.raise_at:
            raise RuntimeError("the game broke")
        time.sleep(self.sleep_s)
        other = threading.Thread(target=lambda: [random.random() for _ in range(50)])
        other.start()  # another thread draws from the global random while the game's call runs
        other.join()
        draw = ta.core.random.randint(0, 10**9)  # through a TextArena module's name ``random``, as its games draw
        self.state.add_observation(message=f"draw {draw}",
                                   observation_type=ta.ObservationType.GAME_MESSAGE)
        if self.state.check_turn_limit():
            self.state.set_outcome(reward=1 if action == "win" else 0, reason="over")
        return self.state.step()


@pytest.fixture
def test_games(monkeypatch):
    from textarena.envs.registration import ENV_REGISTRY, EnvSpec

    for name, kw in (("RlvrDraw-v0", {}), ("RlvrBroken-v0", {"raise_at": 2}), ("RlvrSlow-v0", {"sleep_s": 0.5})):
        monkeypatch.setitem(ENV_REGISTRY, name, EnvSpec(id=name, entry_point=DrawingGame, default_wrappers=None,
                                                        kwargs=kw))


def guess_tasks(n=3, split="heldout", **kw):
    return load_task_source(TextArenaTasks(**{**GUESS, **kw}, n=n, split=split))


def test_observations_are_the_new_messages_and_the_outcome_is_the_games():
    task = guess_tasks(1, prompt="Guess 1-50 as [n].")[0]
    env = make_env(task)
    assert isinstance(env, TextArenaEnv) and env.reset(task).text == "Guess 1-50 as [n]."
    lo, hi, seen = 1, 50, []
    while not env.done:  # halving wins within the game's turns
        guess = (lo + hi) // 2
        obs = env.step(f"[{guess}]").observation
        seen.append(obs)
        if "higher" in obs:
            lo = guess + 1
        elif "lower" in obs:
            hi = guess - 1
    assert all(o.count("\n") == 0 and "Guess The Number" not in o for o in seen)  # no history, no intro
    assert env.end_state()["reward"] == 1.0 and env.goal_result().met
    v = EnvPredicateVerifier().judge_env(env)
    assert v.outcome == "pass" and v.reward == 1.0


def test_invalid_moves_and_the_turn_limit_follow_the_game_and_partial_rewards_are_not_wins():
    task = guess_tasks(1)[0]
    env = make_env(task)
    assert "Guess The Number" in env.reset(task).text  # no prompt set: the game's own introduction
    obs = env.step("no move").observation
    assert "invalid move" in obs and not env.done and env.format_errors
    env.reset(task)
    n = 0
    for k in range(1, 51):  # a losing sweep: the game allows max_turns + 1 guesses (its own count)
        if env.done:
            break
        env.step(f"[{k}]")
        n += 1
    end = env.end_state()
    if end["reward"] != 1.0:
        assert n == 7 and 0 < end["reward"] < 1 and not env.goal_result().met
        assert EnvPredicateVerifier().judge_env(env).reward == 0.0


def test_an_episode_replays_to_the_same_outcome_from_its_seed():
    tasks = guess_tasks(4)
    moves = ["[25]", "[12]", "[37]", "[6]", "[44]", "[18]", "[30]"]
    for task in tasks:
        runs = []
        for _ in range(2):
            env = make_env(task)
            env.reset(task)
            random.seed(12345 + len(runs))  # other code reseeding the global random between episodes
            obs = [env.step(m).observation for m in moves if not env.done]
            runs.append((obs, env.end_state()))
        assert runs[0] == runs[1]
        assert EnvPredicateVerifier().verify(task, moves).reward == float(runs[0][1]["reward"] == 1.0)


def test_parallel_games_do_not_share_random_state(test_games):
    tasks = load_task_source(TextArenaTasks(env="RlvrDraw-v0", n=6, split="train"))

    def play(task, noise):
        env = make_env(task)
        env.reset(task)
        out = []
        while not env.done:
            noise()
            out.append(env.step("x").observation)
        return out

    alone = [play(t, lambda: None) for t in tasks]
    for t, obs in zip(tasks, alone):  # the game's stream from its seed, untouched by the thread drawing meanwhile
        r = random.Random(t.gold["init"]["seed"])
        assert obs[:-1] == [f"draw {r.randint(0, 10**9)}" for _ in obs[:-1]]
    assert len({tuple(a) for a in alone}) == len(tasks)  # each seed its own draws
    results: dict[int, list] = {}
    noise = lambda: [random.random() for _ in range(200)]  # noqa: E731 - other code drawing meanwhile
    threads = [threading.Thread(target=lambda i=i, t=t: results.__setitem__(i, play(t, noise)))
               for i, t in enumerate(tasks)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [results[i] for i in range(len(tasks))] == alone
    state = random.getstate()
    play(tasks[0], lambda: None)
    assert random.getstate() == state  # the caller's global random state is left as it was


def test_a_raising_game_is_infra_never_a_crash(test_games):
    task = load_task_source(TextArenaTasks(env="RlvrBroken-v0", n=1))[0]
    v = EnvPredicateVerifier().verify(task, ["a", "b", "c"])
    assert v.outcome == "infra" and "the game broke" in v.details["error"]
    slow = load_task_source(TextArenaTasks(env="RlvrSlow-v0", n=1))[0]
    v = EnvPredicateVerifier(limits=EnvLimits(tool_timeout_s=0.1)).verify(slow, ["a"])
    assert v.outcome == "infra" and "took more than 0.1s" in v.details["error"]
    time.sleep(0.6)  # the abandoned call returns and lets go of the lock; games go on
    assert EnvPredicateVerifier(limits=EnvLimits(tool_timeout_s=5)).verify(task, ["a"]).outcome in ("wrong", "pass")


def test_the_task_source_refuses_two_player_games_downloading_games_and_unknown_ids():
    with pytest.raises(DataError, match=r"'TicTacToe-v0'.*single-player"):
        load_task_source(TextArenaTasks(env="TicTacToe-v0", n=2))
    with pytest.raises(DataError, match=r"'Hangman-v0' downloads data.*nltk.download\('words'\)"):
        load_task_source(TextArenaTasks(env="Hangman-v0", n=2))
    with pytest.raises(DataError, match="unknown env 'NoSuchGame-v0'"):
        load_task_source(TextArenaTasks(env="NoSuchGame-v0", n=2))
    with pytest.raises(DataError, match="options .*refused"):
        load_task_source(TextArenaTasks(env=GUESS["env"], kwargs={"no_such_option": 1}, n=2))


def test_splits_are_disjoint_and_deterministic_and_the_teacher_plays_the_game(tmp_path):
    train, held = guess_tasks(40, split="train"), guess_tasks(40)
    assert not {t.gold["init"]["seed"] for t in train} & {t.gold["init"]["seed"] for t in held}
    assert [t.id for t in guess_tasks(40)] == [t.id for t in held]
    teacher = tmp_path / "teacher.py"
    teacher.write_text("def act(observations, actions, rng):\n    return '[%d]' % (len(actions) + 1)\n")
    tasks = guess_tasks(3, teacher=f"{teacher}:act", feedback="ok")
    for t in tasks:
        turns = __import__("json").loads(t.solution)
        assert turns == play_teacher(t, lambda o, a, r: f"[{len(a) + 1}]") and turns[0] == "[1]"
        env = make_env(t)
        env.reset(t)
        assert all(env.step(m).observation in ("ok", "") for m in turns)  # the feedback ablation
    with pytest.raises(DataError, match="no function 'nope'"):
        guess_tasks(1, teacher=f"{teacher}:nope")


def test_tasks_spec_form():
    from rlvr.commands.evaluate import parse_tasks_arg

    src = parse_tasks_arg("textarena:GuessTheNumber-v0:7")
    assert isinstance(src, TextArenaTasks) and src.n == 7 and src.split == "heldout"
    for bad in ("textarena:", "textarena:X:0", "textarena:a:b:c"):
        with pytest.raises(DataError, match="textarena"):
            parse_tasks_arg(bad)


def test_no_file_in_src_names_a_game():
    from textarena.envs.registration import ENV_REGISTRY

    # every registered id, and every game's CamelCase name (its folder: GuessTheNumber); one-word names such
    # as Set or Chess are ordinary words and are not searched for
    folders = {str(s.entry_point).split(".")[2] for s in ENV_REGISTRY.values() if str(s.entry_point).count(".") > 2}
    games = set(ENV_REGISTRY) | {f for f in folders if sum(c.isupper() for c in f) >= 2}
    assert len(games) > 100 and "GuessTheNumber" in games
    # src/rlvr/recipes links to the top-level recipes/ (user recipes may name games)
    files = [p for p in SRC.rglob("*") if p.suffix in (".py", ".yaml", ".json", ".md") and "recipes" not in p.parts]
    words = {p: set(re.findall(r"[A-Za-z0-9_-]+", p.read_text(errors="replace"))) for p in files}
    hits = [f"{p.relative_to(SRC)}: {w}" for p, ws in words.items() for w in ws
            if w in games or w.split("-")[0] in games or w.removesuffix("Env") in games]
    assert not hits, hits
