"""A group-sequential design: Lan-DeMets alpha spending and the repeated confidence intervals it gives.

Looking at a comparison again after each extra round, and stopping once its interval excludes 1, would make a
95% interval a much weaker one: every look is another chance for noise to cross the line. A group-sequential
design spends the error rate ``alpha`` over the looks instead. The spending function ``alpha(t)`` says how much
may have been spent once a fraction ``t`` of the planned information has been seen; look ``k`` gets the boundary
``c_k`` such that, with no difference, the chance that the statistic first crosses a boundary at look ``k`` is
``alpha(t_k) - alpha(t_{k-1})``. The intervals ``estimate +- c_k * se_k`` then cover the truth at *every* look at
once with probability ``1 - alpha(t_last)`` (Jennison and Turnbull's repeated confidence intervals, 2000, ch. 9),
so the interval at whichever look the study stopped at, for whatever reason, holds ``1 - alpha``.

Spending: Lan and DeMets' O'Brien-Fleming type, ``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``: it spends
almost nothing early (a look on three restarts a side is nearly free) and close to ``alpha`` at the last look, so a
design that runs to its end loses little width against the fixed design of the same size.

The boundaries are those of the normal statistic, with correlation ``sqrt(t_j / t_k)`` between looks (independent
increments), computed with :func:`scipy.stats.multivariate_normal.cdf` (Genz's quasi-Monte Carlo, seeded, so the
same looks give the same boundaries). Autotune's intervals are t intervals on a handful of restarts: each look
uses its boundary's *nominal* level (``2 - 2 Phi(c_k)``) with the t quantile of its own degrees of freedom, the
usual small-sample conversion (Jennison and Turnbull, section 3.8). That step is approximate; the coverage
benchmark (docs/benchmarks.md) measures the level it holds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from autotune.stats import scipy_optimize, scipy_stats

__all__ = ["SPENDING", "obrien_fleming_spent", "look_levels"]

#: Quasi-Monte Carlo points per dimension of the boundary integral.
_POINTS = 5000

#: The spending function's name, as reports state it.
SPENDING = "Lan-DeMets O'Brien-Fleming"


def obrien_fleming_spent(t: float, alpha: float) -> float:
    """Two-sided error spent once a fraction ``t`` of the planned information is in: ``2 - 2 Phi(z / sqrt(t))``.

    0 at ``t = 0``, increasing, and exactly ``alpha`` at ``t >= 1`` (a design that runs past its plan spends no
    more: the information fraction is capped at 1).
    """
    if t <= 0.0:
        return 0.0
    if t >= 1.0:
        return alpha
    norm = scipy_stats().norm
    z = norm.isf(alpha / 2.0)
    return float(2.0 * norm.sf(z / math.sqrt(t)))


@functools.lru_cache(maxsize=512)
def _boundaries(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """The z boundaries of looks at ``fractions``; each look's depends only on the looks before it (cached)."""
    stats = scipy_stats()
    k = len(fractions) - 1
    target = 1.0 - obrien_fleming_spent(fractions[k], alpha)  # P(no crossing at looks 1..k) with no difference
    if k == 0:
        return (float(stats.norm.isf((1.0 - target) / 2.0)),)
    bounds = _boundaries(fractions[:k], alpha)
    ts = np.asarray(fractions)
    cov = np.sqrt(np.minimum.outer(ts, ts) / np.maximum.outer(ts, ts))
    earlier = np.asarray(bounds)

    def stay(c: float) -> float:
        # The same quasi-random points at every c (a fresh generator, one seed) make this a smooth function of c
        # for the root finder, and the boundaries reproducible; its error is about 1e-5 in probability.
        upper = np.append(earlier, c)
        return float(stats.multivariate_normal.cdf(upper, np.zeros(k + 1), cov, lower_limit=-upper,
                                                   maxpts=_POINTS * (k + 1), abseps=1e-7, releps=0.0,
                                                   rng=np.random.default_rng(0))) - target

    spend = obrien_fleming_spent(fractions[k], alpha) - obrien_fleming_spent(fractions[k - 1], alpha)
    high = float(stats.norm.isf(max(1e-12, spend) / 2.0)) + 1.0  # crossing first here is rarer than crossing here
    if stay(high) < 0.0:
        return (*bounds, math.inf)  # the earlier looks spent all of alpha(t_k): this one spends nothing
    return (*bounds, float(scipy_optimize().brentq(stay, 0.5, high, xtol=1e-4)))


def look_levels(fractions: Sequence[float], alpha: float) -> list[float]:
    """Nominal two-sided level of each look's interval (``2 - 2 Phi(c_k)``), for looks at these information
    fractions (increasing; capped at 1).

    The interval at look ``k`` at confidence ``1 - level_k`` is the repeated confidence interval: all of them cover
    the truth together with probability ``1 - alpha(t_last)`` (at least ``1 - alpha`` once the plan is complete).
    """
    ts = tuple(round(min(1.0, max(1e-9, float(t))), 12) for t in fractions)
    if any(b <= a for a, b in zip(ts, ts[1:])):
        raise ValueError(f"information fractions must increase: {ts}")
    return [float(2.0 * scipy_stats().norm.sf(c)) for c in _boundaries(ts, float(alpha))]
