"""How held-out completions are judged: each task's own verifier, or a stage's reward terms.

With reward terms (``eval.rewards``, ``rlvr eval --reward`` / ``--recipe``) a completion's score is the
weighted sum of the terms, computed as the RL stage computes its reward
(:func:`rlvr.rollout.collector.compose_rewards`, the verifier and the python terms run by
:func:`rlvr.verifiers.judge.reward_judge`), and a held-out **pass is a summed reward of 1 or more**
(:data:`PASS_REWARD`): a reward function that gives partial credit (0.05 for a wrong answer in the right
form) does not make a wrong answer a pass. An ``infra`` verdict stays ``infra`` (never a pass).
"""

from __future__ import annotations

from rlvr.rollout.collector import compose_rewards
from rlvr.verifiers.base import INFRA_OUTCOMES, Verdict
from rlvr.verifiers.judge import Judge, default_judge, reward_judge

PASS_REWARD = 1.0
"""A held-out completion scored by reward terms passes when their weighted sum is at least this."""


def reward_terms(dicts: list[dict] | None):
    """``RewardTerm`` configs from their dict form (as a checkpoint's ``prompt_format.json`` stores them)."""
    from rlvr.config.rl import RewardTerm

    return None if dicts is None else [RewardTerm.model_validate(d) for d in dicts]


def describe_scoring(rewards) -> str:
    """One line for the console and the result JSON: what decides a pass."""
    if not rewards:
        return "each task's verifier"
    terms = " + ".join(f"{t.weight:g} x {t.function if t.name == 'python' else t.name}" for t in rewards)
    return f"reward terms {terms}; a pass is a summed reward >= {PASS_REWARD:g}"


class RewardScorer:
    """A judge that scores with reward terms: verdict reward = the weighted sum, passed = sum >= 1.
    Called with ``lengths`` (completion tokens, for the length terms) when the caller has them."""

    wants_lengths = True

    def __init__(self, rewards, workers: int = 0, tokenizer=None, max_new_tokens: int = 64):
        from rlvr.rollout.model_judge import with_model_judges

        self.rewards, self.tok, self.max_new_tokens = list(rewards), tokenizer, max_new_tokens
        self.judge = with_model_judges(reward_judge(self.rewards, workers), self.rewards, tokenizer)
        self.scoring = describe_scoring(self.rewards)

    def __call__(self, tasks, completions, lengths=None) -> list[Verdict]:
        verdicts = self.judge(tasks, completions)
        if lengths is None:
            lengths = [len(self.tok(c, add_special_tokens=False)["input_ids"]) if self.tok is not None else len(c)
                       for c in completions]
        terms = compose_rewards(verdicts, lengths, self.rewards, self.max_new_tokens)
        total = sum(t.weight * terms[t.key] for t in self.rewards)
        out = []
        for i, v in enumerate(verdicts):
            if v.outcome in INFRA_OUTCOMES:
                out.append(v)
                continue
            r = float(total[i])
            passed = r >= PASS_REWARD - 1e-9
            outcome = "pass" if passed else ("wrong" if v.outcome == "pass" else v.outcome)
            details = {**v.details, "rewards": {k: float(x[i]) for k, x in terms.items()}}
            out.append(Verdict(r, passed, outcome, details, v.seconds))
        return out


def verifier_scores(rewards) -> bool:
    """Whether each task's own verifier takes part in scoring with ``rewards`` (None: it alone scores; reward
    terms: when one of them is ``correct``), so the tasks must hold what that verifier needs."""
    return rewards is None or any(t.name == "correct" for t in rewards)


def eval_judge(rewards=None, workers: int = 0, tokenizer=None, max_new_tokens: int = 64) -> Judge:
    """The held-out judge: each task's verifier (``rewards`` None or empty), else a :class:`RewardScorer`."""
    if not rewards:
        return default_judge(workers)
    return RewardScorer(rewards, workers, tokenizer, max_new_tokens)


def judge_with_lengths(judge, tasks, texts, completion_ids) -> list[Verdict]:
    """``judge(tasks, texts)``, passing the completions' token counts to a judge that wants them."""
    if getattr(judge, "wants_lengths", False):
        return judge(tasks, texts, lengths=[len(c) for c in completion_ids])
    return judge(tasks, texts)
