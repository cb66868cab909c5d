"""When a process's warm-up ends, and how long each timed pass runs: the rules every engine measures by.

Stdlib only: the vLLM runner imports this file as its sibling in the engine's own interpreter (a venv or a
container without autotune's dependencies), and the simulator imports it too, so simulated and real restarts stop
their warm-up by the same rule. :mod:`autotune.stats.warmup` is its public face for readers above the engines.

**Warm-up.** A process's first passes run slow: on the H200 (vLLM 0.26.0) a speculative configuration's first
pass ran 3-5x below steady state and ramped over 2-4 passes (720, 1586, 2089, 3826 tok/s), while a baseline did
not ramp; once warm, passes swung by 5-15%. A fixed tolerance ("two passes within 3%") cannot tell the two apart:
it waits out the noise to its cap and could stop inside a ramp. :func:`warmup_end` finds the end of the transient
statistically, after every pass:

1. The process's first pass is always dropped (:data:`DROP_FIRST`): it pays for lazy initialisation whatever the
   configuration.
2. MSER truncation (White 1997) over the remaining passes picks the truncation point ``d`` that minimises the
   marginal standard error ``SS(d) / (n - d)**2`` of what is left, restricted to the first half of the series and
   to a tail of at least :data:`MIN_TAIL` passes. Batch means of :data:`MSER_BATCH` (MSER-5) are used once the
   series holds :data:`MSER_MIN_BATCHES` batches; a restart's handful of passes runs MSER on single passes.
3. The tail after ``d`` must show no upward trend: the least-squares slope of log throughput over the tail, as a
   t statistic, is at most :data:`TREND_T`, or the fitted change across the tail is below :data:`MIN_DRIFT`.
   Warming makes a process faster, so only an upward trend keeps it warming up; a downward one is noise or
   throttling, which more warm-up does not fix.

The workload's ``warmup_passes`` is a floor and ``max_warmup_passes`` a cap (the cap holds whatever the rule says).

**Pass sizing.** A timed pass repeats the workload's prompt set in whole rounds (:func:`timed_rounds`) so that it
lasts about ``workload.pass_seconds``, sized from the last warm-up pass (warm by the rule). Whole rounds keep the
workload's meaning: every configuration runs the same prompts in the same batches, and a request's latency still
counts from its round's start; scaling ``num_prompts`` instead would draw other prompts and change the queue every
request waits in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["DROP_FIRST", "MAX_ROUNDS", "MIN_DRIFT", "MIN_TAIL", "MSER_BATCH", "MSER_MIN_BATCHES", "TREND_T",
           "is_warm", "mser_truncation", "timed_rounds", "warmup_end"]

# The rule's constants, in one place. Which are empirical is said on each.
#: Passes at the start of every process that are never judged (lazy initialisation; by design, not tuned).
DROP_FIRST = 1
#: Passes after the truncation point needed to judge a trend: a slope's t statistic needs three points (by design).
MIN_TAIL = 3
#: MSER-5's batch size (White, Cobb & Spratt 2000), used once there are :data:`MSER_MIN_BATCHES` batches.
MSER_BATCH = 5
#: Batches MSER-5 needs before batching is worth its coarser truncation points (empirical, from the literature's
#: guidance of tens of batches scaled down to what a restart can afford).
MSER_MIN_BATCHES = 4
#: A tail whose log-throughput slope has a t statistic above this is still ramping. Empirical: about the one-sided
#: 15% point of t with one degree of freedom, so stationary noise costs an extra pass about one time in seven, while
#: the H200's measured ramp (t about 5 over three passes) is never taken for warm.
TREND_T = 2.0
#: A fitted rise across the tail below this fraction of throughput is not worth warming up for, however regular
#: (empirical: well inside the 5-15% pass-to-pass noise measured on the H200).
MIN_DRIFT = 0.02
#: The most rounds of the prompt set one timed pass may run (a guard against a rate measured wrongly as huge).
MAX_ROUNDS = 1000


def mser_truncation(values: Sequence[float], batch: int = 1, min_tail: int = MIN_TAIL) -> int | None:
    """MSER truncation point of ``values`` in passes, or ``None`` when the series is too short to have one.

    Batch means of ``batch`` consecutive values (a trailing partial batch left out) are truncated at the ``d``
    minimising ``SS(d) / (m - d)**2`` over ``d`` in the first half of the ``m`` batches, leaving at least
    ``min_tail`` values; ties go to the earliest point.
    """
    means = [sum(values[i:i + batch]) / batch for i in range(0, len(values) - batch + 1, batch)]
    m = len(means)
    tail_batches = max(1, math.ceil(min_tail / batch))
    last = min(m // 2, m - tail_batches)
    if last < 0:
        return None
    best, best_d = math.inf, 0
    for d in range(last + 1):
        rest = means[d:]
        mean = sum(rest) / len(rest)
        stat = sum((x - mean) ** 2 for x in rest) / len(rest) ** 2
        if stat < best:
            best, best_d = stat, d
    return best_d * batch


def _rising(tail: Sequence[float]) -> bool:
    """True when ``tail`` (throughputs, > 0) rises: a significant and material least-squares slope of its log."""
    ys = [math.log(v) for v in tail]
    n = len(ys)
    x_mean, y_mean = (n - 1) / 2, sum(ys) / n
    sxx = sum((i - x_mean) ** 2 for i in range(n))
    slope = sum((i - x_mean) * (y - y_mean) for i, y in enumerate(ys)) / sxx
    if slope * (n - 1) < math.log1p(MIN_DRIFT):
        return False
    sse = sum((y - (y_mean + slope * (i - x_mean))) ** 2 for i, y in enumerate(ys))
    se = math.sqrt(sse / (n - 2) / sxx)
    return se == 0.0 or slope / se > TREND_T


def is_warm(tok_s: Sequence[float]) -> bool:
    """Whether the passes so far end warm by the rule alone (no floor, no cap): see the module's text."""
    judged = [float(v) for v in tok_s[DROP_FIRST:]]
    if len(judged) < MIN_TAIL or any(not v > 0 or not math.isfinite(v) for v in judged):
        return False
    batch = MSER_BATCH if len(judged) >= MSER_BATCH * MSER_MIN_BATCHES else 1
    d = mser_truncation(judged, batch)
    return d is not None and not _rising(judged[d:])


def warmup_end(tok_s: Sequence[float], minimum: int, maximum: int) -> bool:
    """Whether warm-up stops after the passes ``tok_s`` seen so far: at the cap ``maximum``, else once there are at
    least ``minimum`` passes and :func:`is_warm` holds. ``minimum`` 0 with no pass run yet stops at once."""
    n = len(tok_s)
    if n >= max(maximum, minimum):
        return True
    return n >= minimum and (n == 0 or is_warm(tok_s))


def timed_rounds(pass_seconds: float, round_seconds: float | None) -> int:
    """Rounds of the prompt set one timed pass runs to last about ``pass_seconds``, from one warm round's duration.

    ``pass_seconds`` 0 (sizing off) or an unknown round duration (no warm-up ran) gives one round.
    """
    if not pass_seconds > 0 or round_seconds is None or not round_seconds > 0:
        return 1
    return max(1, min(MAX_ROUNDS, round(pass_seconds / round_seconds)))
