"""Held-out evaluation during training (for learning curves: pass@1 against training minutes)."""

from __future__ import annotations

from rlvr.config.eval import EvalConfig
from rlvr.data.sources import load_task_source
from rlvr.monitoring.evaluate import default_judge, evaluate
from rlvr.rollout.hf_engine import HFEngine


class EvalHook:
    def __init__(self, cfg: EvalConfig, tokenizer, judge=None, every: int = 0):
        self.cfg = cfg
        self.tok = tokenizer
        self.every = every
        self.tasks = load_task_source(cfg.tasks)
        self.judge = judge or default_judge(cfg.workers)

    def due(self, step: int, max_steps: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == max_steps)

    def run(self, model, step: int) -> dict:
        """Greedy held-out pass@1 (and per family) as ``eval/...`` metrics."""
        engine = HFEngine(model, self.tok, batch_size=self.cfg.batch_size)
        r = evaluate(engine, self.tok, self.tasks, self.judge, k=1, max_new_tokens=self.cfg.max_new_tokens,
                     agent=self.cfg.agent)
        out = {"eval/pass_at_1": r["pass_at_1"], "eval/mean_length": r["mean_length"]}
        out.update({f"eval/pass_at_1/{f}": v for f, v in r["by_family"].items()})
        if "turns_mean" in r:  # closed-loop environment tasks
            out.update({"eval/turns_mean": r["turns_mean"], "eval/tool_calls_mean": r["tool_calls_mean"]})
        return out
