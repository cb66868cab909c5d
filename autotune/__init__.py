"""autotune: a Bayesian-optimisation autotuner for LLM inference engines (vLLM first).

It searches CUDA-graph capture mode, capture sizes, draft-token count and draft method together, runs every
trial in fresh engine processes, audits what the engine resolved at start-up against what was configured,
and verifies the best configurations against the baseline in fresh interleaved restarts.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
