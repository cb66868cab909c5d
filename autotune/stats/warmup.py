"""The warm-up rule and pass sizing, for readers above the engines (reports, benchmarks, tests).

The rule itself lives in :mod:`autotune.engines.vllm._warmup`, below this package, because the engines decide
warm-up live while a process runs: the vLLM runner imports it as a stdlib-only sibling in the engine's own
interpreter, and the simulator imports it so that both stop by the same rule. :mod:`autotune.engines.warmup` is
its public name in the engines, and this module its name above them, for readers of ``stats``; the private module's
docstring explains the rule and says which constants are empirical.
"""

from __future__ import annotations

from autotune.engines.warmup import (DROP_FIRST, MAX_ROUNDS, MIN_DRIFT, MIN_PRIOR_DF, MIN_TAIL, MSER_BATCH,
                                     MSER_MIN_BATCHES, PRIOR_TAIL, TREND_LEVEL, TREND_T, NoisePool, is_warm,
                                     mser_truncation, noise_prior, t_quantile, timed_rounds, warmup_end, warmup_stop)

__all__ = ["DROP_FIRST", "MAX_ROUNDS", "MIN_DRIFT", "MIN_PRIOR_DF", "MIN_TAIL", "MSER_BATCH", "MSER_MIN_BATCHES",
           "PRIOR_TAIL", "TREND_LEVEL", "TREND_T", "NoisePool", "is_warm", "mser_truncation", "noise_prior",
           "t_quantile", "timed_rounds", "warmup_end", "warmup_stop"]
