"""rlvr: SFT -> preference alignment -> RL with verifiable rewards."""

__version__ = "0.1.0"

import rlvr.envs  # noqa: E402,F401  (registers the built-in environments' task generators)
