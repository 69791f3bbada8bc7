"""``textarena``: any single-player game of the ``textarena`` package (extra ``gym``) as a multi-turn environment.

A task is one game: its registry id, constructor options and seed (``gold["init"]``); nothing secret is in the
gold (the game draws its secret from the seed when it resets). An episode:

* ``reset``: the game is built **without TextArena's wrappers** (they re-send the whole history every turn)
  and reset for one player with the task's seed; the first observation is the game's first messages, its
  introduction (the ``PROMPT`` messages) replaced by ``init["prompt"]`` when the source sets one;
* ``step(turn text)``: the turn is the game's action, unparsed by rlvr; the observation is only the messages
  the game produced since the last turn (the echo of the policy's own action dropped). Invalid moves and the
  turn limit are the game's own rules (most single-player games allow one invalid move and show a message,
  then end the game at the next; a game's ``max_turns`` is counted as the game counts it); each invalid move
  is a format error here. ``init["feedback"]`` replaces every observation after the first by a constant
  (an ablation: the game itself still runs on the real moves).
* the end: when the game says it is done, ``close()`` gives its reward. The goal is a reward of at least
  ``goal["reward"]`` (1: a win). Anything lower — TextArena's partial rewards for closeness or completion,
  an invalid-move loss, a turn-limit loss — is not met (outcome ``wrong``, or ``format`` after invalid moves;
  reward 0); the game's own number is kept in the end state.

Random state. TextArena seeds Python's global ``random`` at reset and draws from it (some games from
numpy's) during play. Every call into a game runs under one process-wide lock; while it runs, the name
``random`` inside TextArena's modules is the game's own ``random.Random`` (:class:`GameRandom`), so its draws
never touch the global stream that other threads use meanwhile, and the global states (Python's, for code
that imported single functions, and numpy's) are swapped for the game's own and back. Each game's draws
are its own whatever other games or threads do, and an episode replays to the same outcome from its seed
(numpy draws are shielded from other games, not from other threads drawing from numpy's global state
during the call). A call into a game runs
under ``EnvLimits.tool_timeout_s``, counted from the moment the game holds the lock; past it (or a game
that raises) the step raises and the rollout marks the trajectory ``infra``. A game still running past its timeout keeps the lock: other games wait up to
:data:`LOCK_WAIT_S` and then fail as ``infra`` too.

The task source (:func:`load_textarena_tasks`) probes the game once before drawing tasks, with the network
closed: an unknown id, options the game refuses, a game that cannot be played by one player, and a game
that tries to download data when it is built are refused there, naming the id and the resource.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, ClassVar

from rlvr.data.sources import register_source_loader
from rlvr.data.types import Task
from rlvr.envs.base import (EnvError, GoalResult, LeakGuard, Observation, StepResult, ToolEnv, ToolTimeout,
                            split_of_key)
from rlvr.errors import DataError

NAME = "textarena"
LOCK_WAIT_S = 60.0
"""How long a call into a game waits for the random-state lock before failing (``infra``)."""
PROBE_TIMEOUT_S = 60.0
"""Time allowed to build and reset a game when its task source is read."""
_RANDOM_LOCK = threading.RLock()


def import_textarena():
    """The ``textarena`` module, or DataError saying how to install it."""
    try:
        import textarena
    except ImportError as e:
        raise DataError(f"textarena tasks need the textarena package ({e}); install the extra: "
                        "pip install -e '.[gym]'") from None
    return textarena


def registered_ids() -> list[str]:
    """Every environment id in TextArena's registry."""
    import_textarena()
    from textarena.envs.registration import ENV_REGISTRY

    return sorted(ENV_REGISTRY)


def build_game(env_id: str, kwargs: dict[str, Any]):
    """TextArena's game ``env_id`` built from its registered options updated by ``kwargs``, without wrappers;
    DataError for an unknown id, an entry point that does not import, or options the game refuses."""
    import_textarena()
    from textarena.envs.registration import ENV_REGISTRY

    spec = ENV_REGISTRY.get(env_id)
    if spec is None:
        close = [i for i in sorted(ENV_REGISTRY) if i.lower().startswith(env_id[:4].lower())][:8]
        raise DataError(f"textarena: unknown env {env_id!r} ({len(ENV_REGISTRY)} registered"
                        f"{', e.g. ' + ', '.join(close) if close else ''})")
    entry = spec.entry_point
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise DataError(f"textarena env {env_id!r}: its game does not import ({type(e).__name__}: {e})") from None
    try:
        return entry(**{**spec.kwargs, **kwargs})
    except TypeError as e:
        raise DataError(f"textarena env {env_id!r}: options {kwargs} refused: {e}") from None


class GameRandom(random.Random):
    """A game's own random stream, standing in for the ``random`` module inside TextArena's modules while the
    game runs (its other names — ``Random``, ``SystemRandom`` — are the module's)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(random, name)


_TA_MODULES: list[Any] = []
_SEEN_MODULES = [0]


def textarena_modules() -> list[Any]:
    """TextArena's loaded modules that hold the ``random`` module as ``random`` (refreshed as modules load)."""
    if len(sys.modules) != _SEEN_MODULES[0]:
        _SEEN_MODULES[0] = len(sys.modules)
        _TA_MODULES[:] = [m for name, m in list(sys.modules.items())
                          if name.split(".")[0] == "textarena" and isinstance(getattr(m, "random", None),
                                                                                (type(random), GameRandom))]
    return _TA_MODULES


class Game:
    """One TextArena game with its own ``random`` (and numpy) state; see the module docstring."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], seed: int, timeout_s: float | None = None):
        self.env_id, self.seed, self.timeout_s = env_id, seed, timeout_s
        self._rng = GameRandom(seed)
        self._state = random.Random(seed).getstate()
        self._np_state: Any = None
        self.env = self.call(build_game, env_id, kwargs)

    def call(self, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` with the game's random states in place, under the lock and the timeout. The timeout
        counts from the moment the lock is held (waiting behind other games is not the game's time);
        ToolTimeout past it (the call's thread is abandoned, still holding the lock until it returns)."""
        if not self.timeout_s:
            return self._isolated(fn, args)
        box: dict[str, Any] = {}
        locked, finished = threading.Event(), threading.Event()

        def run() -> None:
            try:
                box["out"] = self._isolated(fn, args, locked)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                box["err"] = e
            finished.set()

        threading.Thread(target=run, daemon=True, name="rlvr-textarena").start()
        locked.wait(LOCK_WAIT_S + 1.0)
        if not finished.wait(self.timeout_s):
            raise ToolTimeout(f"textarena {self.env_id}: a call into the game took more than {self.timeout_s:g}s")
        if "err" in box:
            raise box["err"]
        return box["out"]

    def _isolated(self, fn: Callable, args: tuple, locked: threading.Event | None = None) -> Any:
        if not _RANDOM_LOCK.acquire(timeout=LOCK_WAIT_S):
            raise EnvError(f"textarena {self.env_id}: another game held the random-state lock for {LOCK_WAIT_S:g}s")
        if locked is not None:
            locked.set()
        try:
            np = sys.modules.get("numpy")
            outer, np_outer = random.getstate(), (np.random.get_state() if np is not None else None)
            random.setstate(self._state)
            mods = textarena_modules()
            for m in mods:
                m.random = self._rng
            if np is not None:
                if self._np_state is None:
                    np.random.seed(self.seed % 2**32)
                else:
                    np.random.set_state(self._np_state)
            try:
                return fn(*args)
            finally:
                for m in mods:
                    m.random = random
                self._state = random.getstate()
                random.setstate(outer)
                if np is not None:
                    self._np_state = np.random.get_state()
                    np.random.set_state(np_outer)
        finally:
            _RANDOM_LOCK.release()

    def reset(self) -> None:
        self.call(self.env.reset, 1, self.seed)

    def messages(self) -> list[tuple[int, str, str]]:
        """The messages the game produced for the player since the last call: ``(from, text, type name)``,
        the echo of the player's own action dropped."""
        import textarena as ta

        pid, msgs = self.call(self.env.get_observation)
        out = []
        for m in msgs or []:
            sender, text = m[0], str(m[1])
            kind = m[2] if len(m) > 2 else None
            if sender == pid and kind == ta.ObservationType.PLAYER_ACTION:
                continue
            out.append((sender, text, getattr(kind, "name", str(kind))))
        return out

    def step(self, action: str) -> tuple[bool, bool]:
        """Play ``action``; ``(done, invalid)``: whether the game ended, whether it judged the move invalid."""
        done, _ = self.call(self.env.step, action)
        state = getattr(self.env, "state", None)
        info = (getattr(state, "game_info", None) or {}).get(0, {})
        invalid = bool(getattr(state, "error_count", 0)) or (bool(done) and bool(info.get("invalid_move")))
        return bool(done), invalid

    def outcome(self) -> tuple[float | None, str | None]:
        """The game's reward for the player and its reason, after it ended (``close``)."""
        res = self.call(self.env.close)
        rewards, info = (res if isinstance(res, tuple) and len(res) == 2 else (res, {}))
        reward = (rewards or {}).get(0) if isinstance(rewards, dict) else None
        reason = ((info or {}).get(0) or {}).get("reason") if isinstance(info, dict) else None
        return (None if reward is None else float(reward)), (None if reason is None else str(reason))

    def players(self) -> int:
        return int(getattr(getattr(self.env, "state", None), "num_players", 1))


class TextArenaEnv(ToolEnv):
    """A TextArena game behind the environment protocol (module docstring). No tools: every turn is a move."""

    name: ClassVar[str] = NAME

    def reset(self, task: Task) -> Observation:
        gold = self.task_gold(task)
        init = gold["init"]
        self._task, self.budget, self._done = task, 0, False
        self.turns = self.tool_calls = self.tool_errors = 0
        self.violations, self.format_errors, self.leaks = [], [], []
        self.final_text: str | None = None
        self._policy_text: list[str] = []
        self._guard = LeakGuard([])
        self.actions: list[str] = []
        self.reward: float | None = None
        self.reason: str | None = None
        self.game = Game(init["game"], init.get("kwargs") or {}, init["seed"], self.limits.tool_timeout_s)
        self.game.reset()
        msgs = self.game.messages()
        prompt = init.get("prompt")
        if prompt is not None:
            kept = [m for m in msgs if m[2] != "PROMPT"]
            msgs = [(-1, prompt, "PROMPT")] + kept
        return Observation(self._cap("\n".join(m[1] for m in msgs)), (), 0)

    def step(self, action_text: str) -> StepResult:
        if self._task is None or self._done:
            raise EnvError("step() called " + ("before reset()" if self._task is None else "after done"))
        if not isinstance(action_text, str):
            raise EnvError(f"step() takes the turn's text, got {type(action_text).__name__}")
        self.turns += 1
        action = action_text[: self.limits.max_turn_chars]
        self.actions.append(action)
        info: dict[str, Any] = {"turn": self.turns, "calls": [], "violation": None, "final": False}
        done, invalid = self.game.step(action)
        if invalid:
            self.format_errors.append(f"turn {self.turns}: the game judged the move invalid")
        if done:
            self._done = True
            self.final_text = action
            self.reward, self.reason = self.game.outcome()
            return StepResult("", True, info)
        text = "\n".join(m[1] for m in self.game.messages())
        feedback = self._task.gold["init"].get("feedback")
        if self.turns >= self.limits.max_turns:
            self._done = info["truncated"] = True
        return StepResult(self._cap(text if feedback is None else feedback), self._done, info)

    def _cap(self, text: str) -> str:
        cap = self.limits.max_output_chars
        return text if len(text) <= cap else text[:cap] + "\n...[truncated]"

    def end_state(self) -> dict[str, Any]:
        init = self._task.gold["init"] if self._task is not None else {}
        return {"game": init.get("game"), "seed": init.get("seed"), "actions": list(getattr(self, "actions", [])),
                "done": self._done and getattr(self, "reward", None) is not None,
                "reward": getattr(self, "reward", None), "reason": getattr(self, "reason", None),
                "invalid_moves": len(getattr(self, "format_errors", []))}

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        reward = end_state.get("reward")
        if reward is None:
            return GoalResult(False, ("the game did not end",))
        ok = reward >= goal["reward"]
        return GoalResult(ok, () if ok else (f"the game ended with reward {reward:g}",))

    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        init, goal = gold.get("init"), gold.get("goal")
        if not (isinstance(init, dict) and isinstance(init.get("game"), str) and isinstance(init.get("seed"), int)
                and isinstance(init.get("kwargs", {}), dict)
                and all(isinstance(init.get(k), (str, type(None))) for k in ("prompt", "feedback"))):
            raise DataError("textarena task: gold['init'] must be {'game': id, 'seed': int, 'kwargs': {...}, "
                            "'prompt': text or null, 'feedback': text or null}")
        if not isinstance(goal, dict) or isinstance(goal.get("reward"), bool) or \
                not isinstance(goal.get("reward"), (int, float)):
            raise DataError("textarena task: gold['goal'] must be {'reward': number}")

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        return []  # the game draws its secret from the seed; nothing secret is in the gold


# ----- the task source -----
@contextmanager
def _network_closed(attempts: list[str]):
    """Refuse (and record) every connection and every ``nltk.download`` while the block runs."""
    orig_connect, orig_create, orig_getaddrinfo = socket.socket.connect, socket.create_connection, socket.getaddrinfo

    def refuse(what: str):
        attempts.append(what)
        raise OSError(f"rlvr: no network while a textarena game is built ({what})")

    def connect(self, address, *a, **k):
        refuse(f"connection to {address}")

    def create_connection(address, *a, **k):
        refuse(f"connection to {address}")

    def getaddrinfo(host, *a, **k):
        if host in (None, "localhost", "127.0.0.1", "::1"):
            return orig_getaddrinfo(host, *a, **k)
        refuse(f"lookup of {host}")

    nltk = sys.modules.get("nltk")
    orig_download = getattr(nltk, "download", None)

    def download(info_or_id=None, *a, **k):
        attempts.append(f"nltk.download({info_or_id!r})")
        return False

    socket.socket.connect, socket.create_connection, socket.getaddrinfo = connect, create_connection, getaddrinfo
    if orig_download is not None:
        nltk.download = download
    try:
        yield
    finally:
        socket.socket.connect, socket.create_connection, socket.getaddrinfo = orig_connect, orig_create, orig_getaddrinfo
        if orig_download is not None:
            nltk.download = orig_download


_PROBED: dict[str, str | None] = {}


def probe_game(env_id: str, kwargs: dict[str, Any], seed: int = 0) -> None:
    """Build and reset the game once with the network closed; DataError naming the id when it is unknown,
    refuses ``kwargs``, is not single-player, or tries to download data (naming what it asked for)."""
    key = env_id + json.dumps(kwargs, sort_keys=True, default=str)
    if key not in _PROBED:
        _PROBED[key] = _probe(env_id, kwargs, seed)
    if _PROBED[key] is not None:
        raise DataError(_PROBED[key])


def _probe(env_id: str, kwargs: dict[str, Any], seed: int) -> str | None:
    ta = import_textarena()
    del ta
    if importlib.util.find_spec("nltk") is not None:
        import nltk  # noqa: F401 - imported first, so its download function is closed like the network

    attempts: list[str] = []
    error = None
    with _network_closed(attempts):
        try:
            game = Game(env_id, kwargs, seed, PROBE_TIMEOUT_S)
            game.reset()
            players = game.players()
        except DataError as e:
            return str(e)
        except ToolTimeout:
            error, players = f"building and resetting the game took more than {PROBE_TIMEOUT_S:g}s", 1
        except Exception as e:  # noqa: BLE001 - reported with what it tried to fetch
            lines = [ln.strip() for ln in str(e).splitlines() if any(c.isalnum() for c in ln)]
            error, players = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": "), 1
    if attempts:
        return (f"textarena env {env_id!r} downloads data when it is built ({'; '.join(dict.fromkeys(attempts))})"
                f"{'; then ' + error if error else ''}: there is no network here, so rlvr refuses it")
    if error is not None:
        return (f"textarena env {env_id!r} cannot be played by one player (reset for one player failed: {error}); "
                "rlvr runs single-player TextArena games only")
    if players != 1:
        return f"textarena env {env_id!r} is a {players}-player game; rlvr runs single-player TextArena games only"
    return None


def game_seeds(env_id: str, kwargs: dict[str, Any], n: int, seed: int, split: str) -> list[int]:
    """``n`` distinct game seeds of ``split``, deterministic by ``seed``: a seed belongs to the split that a
    hash of (id, options, seed) names (:func:`rlvr.envs.base.split_of_key`), so the splits never share a game."""
    base = NAME + ":" + env_id + ":" + json.dumps(kwargs, sort_keys=True, default=str)
    out: list[int] = []
    seen: set[int] = set()
    i = 0
    while len(out) < n:
        h = hashlib.blake2b(f"rlvr-textarena-{seed}-{i}".encode(), digest_size=4).digest()
        s = int.from_bytes(h, "big") & 0x7FFFFFFF
        i += 1
        if s not in seen and split_of_key(f"{base}:{s}") == split:
            seen.add(s)
            out.append(s)
    return out


def load_teacher(spec: str) -> Callable:
    """The function ``FILE.py:FUNCTION`` names (the file relative to the working directory)."""
    path, _, fn = spec.rpartition(":")
    p = Path(path)
    if not p.is_file():
        raise DataError(f"textarena teacher {spec!r}: no such file {path!r}")
    mod_spec = importlib.util.spec_from_file_location(f"rlvr_textarena_teacher_{p.stem}", p)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's file
        raise DataError(f"textarena teacher {spec!r}: the file failed to load ({type(e).__name__}: {e})") from None
    if not callable(getattr(module, fn, None)):
        raise DataError(f"textarena teacher {spec!r}: {path} defines no function {fn!r}")
    return getattr(module, fn)


def play_teacher(task: Task, teacher: Callable, max_turns: int = 64) -> list[str]:
    """The teacher's turns on ``task``'s game, seeing what the policy would see."""
    env = TextArenaEnv()
    observations, actions = [env.reset(task).text], []
    rng = random.Random(f"rlvr-textarena-teacher-{task.gold['init']['seed']}")
    while not env.done and len(actions) < max_turns:
        action = str(teacher(list(observations), list(actions), rng))
        actions.append(action)
        observations.append(env.step(action).observation)
    return actions


def load_textarena_tasks(src) -> list[Task]:
    """Tasks for a ``TextArenaTasks`` config: ``n`` games of ``src.split`` (module docstring)."""
    kwargs = dict(src.kwargs)
    probe_game(src.env, kwargs)
    teacher = load_teacher(src.teacher) if src.teacher else None
    tasks = []
    for s in game_seeds(src.env, kwargs, src.n, src.seed, src.split):
        init = {"game": src.env, "kwargs": kwargs, "seed": s, "prompt": src.prompt, "feedback": src.feedback}
        task = Task(id=f"textarena-{src.env}-{src.split}-{s}", prompt=f"{src.env} (game seed {s})", kind="env",
                    gold={"env": NAME, "init": init, "goal": {"reward": 1.0}, "budget": 0}, family=src.env,
                    split=src.split, answer_format="raw", meta={"env": NAME, "game": src.env, "seed": s})
        if teacher is not None:
            try:
                task.solution = json.dumps(play_teacher(task, teacher))
            except DataError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's teacher or the game
                raise DataError(f"textarena teacher {src.teacher!r} on {src.env} seed {s}: "
                                f"{type(e).__name__}: {e}") from None
        tasks.append(task)
    return tasks


register_source_loader(NAME, load_textarena_tasks)
