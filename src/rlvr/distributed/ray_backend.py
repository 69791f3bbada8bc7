"""Rollout workers and a verifier pool as Ray actors, driven by the trainer (``distributed.backend: ray``).

The trainer process keeps the policy and trains it. Each step:

1. the step's prompts are cut into contiguous shards, one per **rollout worker** (an actor holding its
   own copy of the policy and an HF engine); every row is sampled with its own seed
   (``rollout.seeds``), so the samples equal those of one process sampling the whole batch with
   ``sampling.row_seeds: true``;
2. the completions are cut into shards, one per **verifier actor** (each holding the stage's judge);
3. after the update, the trainer's weights are put once into Ray's object store and every worker loads
   them, tagged with the **policy version** (optimizer steps so far); each sample carries the version
   that produced it, so stale samples are detectable (``rollout/staleness``).

Faults: a rollout worker that dies (or passes ``generate_deadline_s``) is killed, restarted with the
latest weights, and its shard re-issued — the step goes on, and ``rollout/worker_restarts`` and
``distributed/events`` say so. A verifier actor that passes ``verify_deadline_s`` is killed and
restarted; each item of its shard is then judged alone, and one that hangs again gets outcome
``timeout`` (one whose actor dies: ``infra``), as the local pool's workers do.

``ray.init()`` starts Ray on this machine unless ``distributed.address`` names a cluster. This module is
the only one that imports ray, and only when a Ray context is built.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch

from rlvr import hooks, omp_wait
from rlvr.config.distributed import DistributedConfig
from rlvr.distributed.torch_dist import chunks, merge_generations, with_row_seeds
from rlvr.models.export import base_config, plain_state_dict
from rlvr.rollout.engine import Generation, SamplingParams
from rlvr.trainers.parallel import DistContext
from rlvr.verifiers.base import Verdict

RAY_PIN = "ray==2.60.0"
STARTUP_TIMEOUT_S = 600.0
"""How long an actor may take to start (import torch, build its model) before it counts as failed;
work deadlines start once it is up."""


def import_ray():
    """``ray``, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError(f"distributed.backend is 'ray' but ray is not installed: pip install 'rlvr[ray]' "
                          f"(tested with {RAY_PIN})") from None
    return ray


def start_ray(cfg: DistributedConfig, cpus_needed: float):
    """Connect to ``cfg.address`` or start a local Ray with enough logical CPUs for the actors; returns
    ``(ray, started_here)``."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    if cfg.address:
        ray.init(address=cfg.address, log_to_driver=True)
        return ray, True
    # workers inherit this environment: the rlvr being run, and quiet threads on a shared machine
    src = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    if src not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, path) if p)
    if not omp_wait.USER_SET:  # Ray workers share the cores: they sleep when idle (rlvr.omp_wait)
        omp_wait.set_env("passive")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ray.init(num_cpus=max(os.cpu_count() or 1, math.ceil(cpus_needed)), include_dashboard=False,
             log_to_driver=True, configure_logging=False)
    return ray, True


class RolloutWorker:
    """Actor: a copy of the policy and an HF engine; samples shards with the weights of its version."""

    def __init__(self, config, tokenizer, dtype, device: str, threads: int, bf16: bool):
        hooks.restore()  # the accelerations the driver process runs with (rlvr.hooks)
        from transformers import AutoModelForCausalLM

        from rlvr.rollout.hf_engine import HFEngine

        torch.set_num_threads(threads)
        self.model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()
        self.engine = HFEngine(self.model, tokenizer, bf16=bf16)
        self.version = -1

    def set_weights(self, state: dict, version: int) -> int:
        self.model.load_state_dict(state, strict=True)
        self.version = version
        return version

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        g = self.engine.generate(prompts, params)
        g.policy_version = [self.version] * len(g.completion_ids)
        return g

    def pid(self) -> int:
        return os.getpid()


class JudgeActor:
    """Actor: the stage's judge, run on shards of ``(task, completion)`` pairs."""

    def __init__(self, judge):
        self.judge = judge

    def verify(self, tasks, completions) -> list[Verdict]:
        return self.judge(list(tasks), list(completions))

    def pid(self) -> int:
        return os.getpid()


def _died(ray) -> tuple[type[BaseException], ...]:
    ex = ray.exceptions
    return tuple(getattr(ex, n) for n in ("RayActorError", "ActorUnavailableError", "WorkerCrashedError",
                                          "ObjectLostError") if hasattr(ex, n))


class ActorSet:
    """Actors of one class, respawned on failure; ``events`` records each restart for the step's log."""

    def __init__(self, ray, cls, args: tuple, n: int, resources: dict, kind: str):
        self.ray, self.kind, self.args = ray, kind, args
        self.cls = ray.remote(**resources)(cls)
        self.actors = [self.cls.remote(*args) for _ in range(n)]
        self.events: list[str] = []
        self.restarts = 0
        self.lock = threading.Lock()
        self.wait_ready(self.actors)

    def wait_ready(self, actors: list) -> None:
        """Block until ``actors`` are up, so that work deadlines do not include their start-up."""
        self.ray.get([a.pid.remote() for a in actors], timeout=STARTUP_TIMEOUT_S)

    def respawn(self, k: int, why: str, init=None) -> None:
        with self.lock:
            try:
                self.ray.kill(self.actors[k], no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.actors[k] = self.cls.remote(*self.args)
            if init is not None:
                init(self.actors[k])
            self.restarts += 1
            self.events.append(f"{self.kind} {k} restarted ({why})")
        self.wait_ready([self.actors[k]])

    def pids(self) -> list[int]:
        return self.ray.get([a.pid.remote() for a in self.actors])

    def take_events(self) -> tuple[int, list[str]]:
        with self.lock:
            n, ev = self.restarts, self.events
            self.restarts, self.events = 0, []
        return n, ev

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass


class RayEngine:
    """The RolloutEngine over Ray rollout workers (see the module doc)."""

    def __init__(self, ray, cfg: DistributedConfig, model, tokenizer, bf16: bool = False):
        self.ray, self.cfg = ray, cfg
        dtype = next(model.parameters()).dtype
        device = "cuda" if cfg.worker_gpus > 0 else "cpu"
        self.workers = ActorSet(ray, RolloutWorker, (base_config(model), tokenizer, dtype, device,
                                                     cfg.worker_threads, bf16), cfg.rollout_workers,
                                {"num_cpus": cfg.worker_cpus, "num_gpus": cfg.worker_gpus}, "rollout worker")
        self.weights, self.version = None, -1
        self.fault_hook = None  # tests: called with the worker index after its shard is submitted

    def _load(self, actor):
        if self.weights is not None:
            return actor.set_weights.remote(self.weights, self.version)
        return None

    def sync_weights(self, model, version: int = 0) -> None:
        """Put the weights once in the object store; every worker loads them (in call order, so a shard
        submitted later samples with them)."""
        with self.workers.lock:
            self.weights, self.version = self.ray.put(plain_state_dict(model)), version
            acks = [a.set_weights.remote(self.weights, version) for a in self.workers.actors]
        try:
            self.ray.get(acks, timeout=self.cfg.generate_deadline_s)
        except _died(self.ray) + (self.ray.exceptions.GetTimeoutError,):
            pass  # the next generate() finds the dead worker, restarts it with these weights

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        params = with_row_seeds(params, len(prompts) * params.n)
        spans = [s for s in chunks(len(prompts), len(self.workers.actors)) if s[1] > s[0]]

        def submit(k: int):
            a, b = spans[k]
            shard = replace(params, row_seeds=params.row_seeds[a * params.n:b * params.n])
            return self.workers.actors[k].generate.remote(prompts[a:b], shard)

        jobs = {k: submit(k) for k in range(len(spans))}
        if self.fault_hook is not None:
            for k in list(jobs):
                self.fault_hook(k)
        results = self._wait(jobs, submit)
        return merge_generations([(spans[k][0], results[k]) for k in range(len(spans))])

    def _wait(self, jobs: dict, submit) -> dict:
        """Results of ``jobs`` (worker -> ref); dead or late workers are restarted and re-issued."""
        results, tries = {}, dict.fromkeys(jobs, 0)
        deadline = time.monotonic() + self.cfg.generate_deadline_s
        while jobs:
            refs = {ref: k for k, ref in jobs.items()}
            ready, _ = self.ray.wait(list(refs), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            failed = []
            if not ready:
                failed = [(k, f"no answer after {self.cfg.generate_deadline_s:.0f}s") for k in jobs]
            for ref in ready:
                k = refs[ref]
                try:
                    results[k] = self.ray.get(ref)
                    del jobs[k]
                except _died(self.ray) as e:
                    failed.append((k, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
            for k, why in failed:
                tries[k] += 1
                if tries[k] > self.cfg.max_restarts:
                    raise RuntimeError(f"rollout worker {k} failed {tries[k]} times in one step (last: {why})")
                self.workers.respawn(k, why, self._load)
                jobs[k] = submit(k)
                deadline = time.monotonic() + self.cfg.generate_deadline_s
        return results

    def close(self) -> None:
        self.workers.close()


class RayJudge:
    """The judge over Ray verifier actors (see the module doc); called like any judge."""

    def __init__(self, ray, cfg: DistributedConfig, judge):
        self.ray, self.cfg = ray, cfg
        self.actors = ActorSet(ray, JudgeActor, (judge,), cfg.verifier_actors, {"num_cpus": 1}, "verifier actor")

    def __call__(self, tasks, completions) -> list[Verdict]:
        tasks, completions = list(tasks), list(completions)
        spans = [s for s in chunks(len(tasks), len(self.actors.actors)) if s[1] > s[0]]
        refs = [self.actors.actors[k].verify.remote(tasks[a:b], completions[a:b]) for k, (a, b) in enumerate(spans)]
        out: list = [None] * len(tasks)
        deadline = time.monotonic() + self.cfg.verify_deadline_s
        for k, ((a, b), ref) in enumerate(zip(spans, refs)):
            try:
                out[a:b] = self.ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
                continue
            except self.ray.exceptions.GetTimeoutError:
                self.actors.respawn(k, f"no answer after {self.cfg.verify_deadline_s:.0f}s")
            except _died(self.ray) as e:
                self.actors.respawn(k, f"{type(e).__name__}")
            out[a:b] = [self._alone(k, tasks[i], completions[i]) for i in range(a, b)]
        return out

    def _alone(self, k: int, task, completion) -> Verdict:
        """One item on a fresh actor: ``timeout`` if it hangs past the deadline, ``infra`` if the actor dies."""
        t0 = time.perf_counter()
        try:
            return self.ray.get(self.actors.actors[k].verify.remote([task], [completion]),
                                timeout=self.cfg.verify_deadline_s)[0]
        except self.ray.exceptions.GetTimeoutError:
            self.actors.respawn(k, "item past the deadline")
            return Verdict(0.0, False, "timeout", {"error": f"verifier actor killed after "
                                                            f"{self.cfg.verify_deadline_s:.0f}s"},
                           time.perf_counter() - t0)
        except _died(self.ray) as e:
            self.actors.respawn(k, "died on an item")
            return Verdict.infra(f"verifier actor died: {type(e).__name__}", time.perf_counter() - t0)

    def close(self) -> None:
        self.actors.close()


class RayContext(DistContext):
    """The trainer in this process, rollouts and verification on Ray actors (``distributed.backend: ray``)."""

    def __init__(self, cfg: DistributedConfig):
        import importlib.util

        if importlib.util.find_spec("ray") is None:  # fail before any stage runs, not at the first RL one
            import_ray()
        self.cfg = cfg
        self._ray, self._started = None, False
        self._engine: RayEngine | None = None
        self._judge: RayJudge | None = None
        self.max_staleness = cfg.max_staleness  # the RL stage prefetches its rollouts (trainers/sources.py)

    @property
    def ray(self):
        """Ray, started (or connected to) on first use: a recipe without RL stages never starts it."""
        if self._ray is None:
            need = self.cfg.rollout_workers * self.cfg.worker_cpus + self.cfg.verifier_actors
            self._ray, self._started = start_ray(self.cfg, need)
        return self._ray

    def engine(self, model, tokenizer, bf16: bool = False) -> RayEngine:
        if self._engine is not None:  # a later stage: fresh workers for its model
            self._engine.close()
        self._engine = RayEngine(self.ray, self.cfg, model, tokenizer, bf16)
        return self._engine

    def wrap_judge(self, judge) -> RayJudge:
        if self._judge is not None:
            self._judge.close()
        self._judge = RayJudge(self.ray, self.cfg, judge)
        return self._judge

    def publish(self, model, version: int) -> None:
        if self._engine is not None:
            self._engine.sync_weights(model, version)

    def step_metrics(self) -> dict:
        restarts, events = 0, []
        for s in (self._engine.workers if self._engine else None, self._judge.actors if self._judge else None):
            if s is not None:
                n, ev = s.take_events()
                restarts, events = restarts + n, events + ev
        out = {"rollout/worker_restarts": restarts}
        if events:
            out["distributed/events"] = "; ".join(events)
        return out

    def close(self) -> None:
        for part in (self._engine, self._judge):
            if part is not None:
                part.close()
        if self._started:
            self._ray.shutdown()
