"""rlvr: SFT -> preference alignment -> RL with verifiable rewards."""

__version__ = "0.1.0"
