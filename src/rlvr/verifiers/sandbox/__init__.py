"""Run untrusted code: bubblewrap namespaces (when available), an unprivileged uid per run, rlimits
(soft = hard), a scrubbed environment, a fresh working dir, output caps, and a kill of the whole
process tree afterwards. See docs/verifier-security.md for what this does and does not protect against.

Function tasks run the trusted tests in a separate harness process that calls the sandboxed candidate
across a plain-data pipe (:mod:`rlvr.verifiers.sandbox.wire`). Where the isolation is ``bwrap+uid`` they
run warm (:mod:`rlvr.verifiers.sandbox.warm`): both processes are forked from long-lived templates (the
candidate's inside bubblewrap, :mod:`rlvr.verifiers.sandbox.forkserver`) instead of started cold.
"""

from rlvr.verifiers.sandbox.isolation import LEVELS, Isolation, detect_isolation, isolation_report
from rlvr.verifiers.sandbox.jobs import SandboxResult, run_function, run_program
from rlvr.verifiers.sandbox.limits import SandboxLimits

__all__ = [
    "LEVELS",
    "Isolation",
    "SandboxLimits",
    "SandboxResult",
    "detect_isolation",
    "isolation_report",
    "run_function",
    "run_program",
]
