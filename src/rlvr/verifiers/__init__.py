"""Executable rewards. No torch, no model: verifiers treat every completion as hostile input."""

from rlvr.verifiers.base import OUTCOMES, Verdict, Verifier

__all__ = ["OUTCOMES", "Verdict", "Verifier"]
