"""The warm-up rule, the engines' public name for it.

The rule lives in :mod:`autotune.engines.vllm._warmup` because the vLLM runner imports it as a stdlib-only sibling
in the engine's own interpreter (a file beside the runner, not a package module); the simulator imports it so that
both stop by the same rule. Packages above the engines read it here (:mod:`autotune.stats.warmup` re-exports it
for the readers above ``stats``); the private module's docstring explains the rule and which constants are
empirical.
"""

from __future__ import annotations

from autotune.engines.vllm._warmup import (DROP_FIRST, MAX_ROUNDS, MIN_DRIFT, MIN_PRIOR_DF, MIN_TAIL, MSER_BATCH,
                                           MSER_MIN_BATCHES, PRIOR_TAIL, TREND_LEVEL, TREND_T, NoisePool, is_warm,
                                           mser_truncation, noise_prior, t_quantile, timed_rounds, warmup_end,
                                           warmup_stop)

__all__ = ["DROP_FIRST", "MAX_ROUNDS", "MIN_DRIFT", "MIN_PRIOR_DF", "MIN_TAIL", "MSER_BATCH", "MSER_MIN_BATCHES",
           "PRIOR_TAIL", "TREND_LEVEL", "TREND_T", "NoisePool", "is_warm", "mser_truncation", "noise_prior",
           "t_quantile", "timed_rounds", "warmup_end", "warmup_stop"]
