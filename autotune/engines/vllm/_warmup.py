"""When a process's warm-up ends, and how long each timed pass runs: the rules every engine measures by.

Stdlib only: the vLLM runner imports this file as its sibling in the engine's own interpreter (a venv or a
container without autotune's dependencies), and the simulator imports it too, so simulated and real restarts stop
their warm-up by the same rule. :mod:`autotune.engines.warmup` is its public
name, and :mod:`autotune.stats.warmup` for readers above the engines.

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

**With a noise prior.** Steps 2-3 need three judged passes, so without help the rule cannot say "warm" before the
fourth pass, which is the workload's default cap: every restart would spend the cap and the rule would decide
nothing. But a study already knows how noisy a warm process is: every earlier restart's timed passes are warm
passes of a process. :class:`NoisePool` pools their log throughputs' spread around each restart's own mean (scaled
to a one-round warm-up pass by ``sqrt(rounds)``, rounds assumed independent; on the H200 the scaled timed spread,
0.17, matched warm-up passes 3-4's own, 0.20) into a prior ``(log_sd, df)`` that the study hands the engine with
each restart (:func:`warmup_end`'s ``prior``; the vLLM request's ``warmup_noise``). With a prior of at least
:data:`MIN_PRIOR_DF` degrees of freedom:

* a tail of :data:`PRIOR_TAIL` (two) judged passes is enough, for MSER's truncation as for the trend, so the rule
  can say "warm" after the third pass;
* the slope's t statistic uses the pooled variance: the prior's ``df * log_sd**2`` plus the tail's own residual
  sum of squares, over ``df`` plus the tail's residual degrees of freedom, and is judged against Student's t at
  the one-sided level :data:`TREND_T` stands for (:data:`TREND_LEVEL`) with those pooled degrees of freedom, so the
  prior adds evidence without moving the level; the rise must still be material (:data:`MIN_DRIFT`).

Without a prior (a study's first restarts, a runner that got none) the rule is steps 1-3 unchanged.

``python -m autotune.bench.warmup`` replays the old "two passes within 3%" rule, the rule without and with a prior
on the H200's recorded pass series and on synthetic ramps under 3-15% pass noise (docs/benchmarks.md, "Warm-up
rule"): with a prior, flat processes stop after 3.15 passes instead of 4 (the H200's recorded restarts: 3.1), ramps
of up to three passes are never taken for warm, and for ramps of four passes the timed passes' bias stays within
0.6%. The default cap stays 4: the measured ramps end within it, and a higher one only helps longer ramps.

Which constants are empirical: :data:`TREND_T` and :data:`MIN_DRIFT` (and with them :data:`TREND_LEVEL`, the level
:data:`TREND_T` stands for), :data:`MSER_MIN_BATCHES`; the ``sqrt(rounds)`` scaling of the prior is an assumption
(rounds independent) that the H200 data agreed with. :data:`DROP_FIRST`, :data:`MIN_TAIL`, :data:`PRIOR_TAIL`,
:data:`MIN_PRIOR_DF` and :data:`MSER_BATCH` are by design or from the literature. None was fitted to the benchmark.

The workload's ``warmup_passes`` is a floor and ``max_warmup_passes`` a cap (the cap holds whatever the rule says).
:func:`warmup_stop` says which ended a warm-up: the cap (``"cap"``), the rule (``"rule"``), the rule with a prior
(``"prior"``), or a floor of 0 (``"none"``); the runner and the simulator record it as the ``warmup_rule`` fact.

**Pass sizing.** A timed pass repeats the workload's prompt set in whole rounds (:func:`timed_rounds`) so that it
lasts about ``workload.pass_seconds``, sized from the last warm-up pass (warm by the rule). Whole rounds keep the
workload's meaning: every configuration runs the same prompts in the same batches, and a request's latency still
counts from its round's start; scaling ``num_prompts`` instead would draw other prompts and change the queue every
request waits in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

__all__ = ["DROP_FIRST", "MAX_ROUNDS", "MIN_DRIFT", "MIN_PRIOR_DF", "MIN_TAIL", "MSER_BATCH", "MSER_MIN_BATCHES",
           "PRIOR_TAIL", "TREND_LEVEL", "TREND_T", "NoisePool", "is_warm", "mser_truncation", "noise_prior",
           "t_quantile", "timed_rounds", "warmup_end", "warmup_stop"]

# The rule's constants, in one place. Which are empirical is said on each.
#: Passes at the start of every process that are never judged (lazy initialisation; by design, not tuned).
DROP_FIRST = 1
#: Passes after the truncation point needed to judge a trend: a slope's t statistic needs three points (by design).
MIN_TAIL = 3
#: Judged passes enough for a trend with a noise prior: a slope needs two points when the noise is known (by design).
PRIOR_TAIL = 2
#: MSER-5's batch size (White, Cobb & Spratt 2000), used once there are :data:`MSER_MIN_BATCHES` batches.
MSER_BATCH = 5
#: Batches MSER-5 needs before batching is worth its coarser truncation points (empirical, from the literature's
#: guidance of tens of batches scaled down to what a restart can afford).
MSER_MIN_BATCHES = 4
#: A tail whose log-throughput slope has a t statistic above this is still ramping. Empirical: about the one-sided
#: 15% point of t with one degree of freedom, so stationary noise costs an extra pass about one time in seven, while
#: the H200's measured ramp (t about 5 over three passes) is never taken for warm.
TREND_T = 2.0
#: The one-sided level :data:`TREND_T` stands for (t with one degree of freedom exceeds 1.963 with probability 0.15),
#: used with a noise prior at the pooled degrees of freedom, so the prior changes the evidence, not the level
#: (empirical as :data:`TREND_T` is: stationary noise costs a fourth pass about one restart in seven).
TREND_LEVEL = 0.15
#: Degrees of freedom a noise prior needs before it is used: one restart's three timed passes (by design; the t
#: quantile at the pooled degrees of freedom already pays for a thin prior).
MIN_PRIOR_DF = 2
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


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile at probability ``p`` (0.5 < ``p`` < 1) for ``df`` degrees of freedom, stdlib only.

    Exact for one and two degrees of freedom; beyond, the Cornish-Fisher expansion in ``1/df`` (three terms, within
    0.3% of the exact quantile from three degrees of freedom at the levels used here).
    """
    if df <= 1:
        return math.tan(math.pi * (p - 0.5))
    if df <= 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def noise_prior(value: Any) -> tuple[float, float] | None:
    """A usable noise prior ``(log_sd, df)`` from ``value`` (a pair, a ``{"log_sd", "df"}`` mapping or ``None``);
    ``None`` when absent, malformed or thinner than :data:`MIN_PRIOR_DF`, so that a bad prior means no prior."""
    try:
        if isinstance(value, Mapping):
            sd, df = float(value["log_sd"]), float(value["df"])
        elif value is None:
            return None
        else:
            sd, df = (float(x) for x in value)
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(sd) and math.isfinite(df)) or sd < 0 or df < MIN_PRIOR_DF:
        return None
    return sd, df


class NoisePool:
    """Pooled within-process noise of warm passes, in log throughput of one round: a study's warm-up prior.

    :meth:`add` takes a restart's timed passes (warm by the rule) and the rounds each ran; :meth:`prior` gives
    ``(log_sd, df)``, or ``None`` until :data:`MIN_PRIOR_DF` degrees of freedom are in.
    """

    def __init__(self) -> None:
        self.ss = 0.0
        self.df = 0

    def add(self, tok_s: Sequence[float], rounds: object = 1) -> None:
        """Add one process's warm passes (``rounds`` rounds of the prompt set each); ignored if fewer than two are
        finite and positive. ``rounds`` is read as a stored fact may hold it: anything but a number >= 1 counts 1."""
        ys = [math.log(v) for v in tok_s if isinstance(v, int | float) and v > 0 and math.isfinite(v)]
        if len(ys) < 2:
            return
        r = float(rounds) if isinstance(rounds, int | float) and rounds >= 1 else 1.0
        mean = sum(ys) / len(ys)
        self.ss += r * sum((y - mean) ** 2 for y in ys)
        self.df += len(ys) - 1

    def prior(self) -> tuple[float, float] | None:
        """``(log_sd, df)`` of one warm-up pass, or ``None`` while too thin."""
        return noise_prior((math.sqrt(self.ss / self.df), self.df)) if self.df else None


def _rising(tail: Sequence[float], prior: tuple[float, float] | None = None) -> bool:
    """True when ``tail`` (throughputs, > 0) rises: a significant and material least-squares slope of its log.

    Without ``prior`` the tail's own residuals judge (three passes at least, t above :data:`TREND_T`); with one,
    its variance pools with theirs (two passes are enough) and t is judged at :data:`TREND_LEVEL`.
    """
    ys = [math.log(v) for v in tail]
    n = len(ys)
    x_mean, y_mean = (n - 1) / 2, sum(ys) / n
    sxx = sum((i - x_mean) ** 2 for i in range(n))
    slope = sum((i - x_mean) * (y - y_mean) for i, y in enumerate(ys)) / sxx
    if slope * (n - 1) < math.log1p(MIN_DRIFT):
        return False
    sse = sum((y - (y_mean + slope * (i - x_mean))) ** 2 for i, y in enumerate(ys))
    if prior is None:
        se = math.sqrt(sse / (n - 2) / sxx)
        return se == 0.0 or slope / se > TREND_T
    sd, prior_df = prior
    df = prior_df + n - 2
    se = math.sqrt((sse + prior_df * sd**2) / df / sxx)
    return se == 0.0 or slope / se > t_quantile(1.0 - TREND_LEVEL, df)


def is_warm(tok_s: Sequence[float], prior: Any = None) -> bool:
    """Whether the passes so far end warm by the rule alone (no floor, no cap): see the module's text.

    ``prior``: a noise prior ``(log_sd, df)`` (:func:`noise_prior` reads it; an unusable one counts as none).
    """
    usable = noise_prior(prior)
    judged = [float(v) for v in tok_s[DROP_FIRST:]]
    if len(judged) < (PRIOR_TAIL if usable else MIN_TAIL) or any(not v > 0 or not math.isfinite(v) for v in judged):
        return False
    batch = MSER_BATCH if len(judged) >= MSER_BATCH * MSER_MIN_BATCHES else 1
    d = mser_truncation(judged, batch, PRIOR_TAIL if usable else MIN_TAIL)
    return d is not None and not _rising(judged[d:], usable)


def warmup_stop(tok_s: Sequence[float], minimum: int, maximum: int, prior: Any = None) -> str | None:
    """Why warm-up stops after the passes ``tok_s`` seen so far, or ``None`` while it goes on: ``"cap"`` at
    ``maximum`` passes, ``"none"`` when ``minimum`` is 0 and no pass ran, else, once there are at least ``minimum``
    passes, ``"prior"`` or ``"rule"`` when :func:`is_warm` holds (``"prior"`` when a usable prior was given)."""
    n = len(tok_s)
    if n >= max(maximum, minimum):
        return "cap"
    if n < minimum:
        return None
    if n == 0:
        return "none"
    if not is_warm(tok_s, prior):
        return None
    return "prior" if noise_prior(prior) else "rule"


def warmup_end(tok_s: Sequence[float], minimum: int, maximum: int, prior: Any = None) -> bool:
    """Whether warm-up stops after the passes ``tok_s`` seen so far: at the cap ``maximum``, else once there are at
    least ``minimum`` passes and :func:`is_warm` holds (given ``prior``, if any). ``minimum`` 0 with no pass run yet
    stops at once."""
    return warmup_stop(tok_s, minimum, maximum, prior) is not None


def timed_rounds(pass_seconds: float, round_seconds: float | None) -> int:
    """Rounds of the prompt set one timed pass runs to last about ``pass_seconds``, from one warm round's duration.

    ``pass_seconds`` 0 (sizing off) or an unknown round duration (no warm-up ran) gives one round.
    """
    if not pass_seconds > 0 or round_seconds is None or not round_seconds > 0:
        return 1
    return max(1, min(MAX_ROUNDS, round(pass_seconds / round_seconds)))
