"""Model loading, the tiny from-scratch factory, logprob computation and checkpoints."""
