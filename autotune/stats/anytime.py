"""An anytime-valid confidence sequence for a change between two speedups: then (stored) against now (measured).

``autotune recheck`` compares today's speedup of a configuration over its baseline with the speedup the study
stored. On the log scale the change is the difference of two log-ratios,

    theta = (mu_now_challenger - mu_now_baseline) - (mu_then_challenger - mu_then_baseline),

estimated by the same difference of log means; its variance is the sum of both estimates' variances
(``sigma^2 * k``, ``k = 1/n_then_c + 1/n_then_b + 1/n_now_c + 1/n_now_b``), so the stored figure's own uncertainty
counts as much as today's. A recheck looks after every round and may stop at any of them, so a fixed-n interval
read at each look would cry wolf far more often than it says; the interval here is a *confidence sequence*: it
covers theta at every look at once with probability ``1 - alpha`` (Ville's inequality), so stopping whenever it
decides, or whenever the budget runs out, keeps the level.

The boundary is the normal-mixture one (Robbins; Howard, Ramdas, McAuliffe and Sekhon 2021, "Time-uniform,
nonparametric, nonasymptotic confidence sequences"; the "always valid p-values" of Johari, Pekelis and Walsh) in
its scale-invariant form for an unknown noise level (Lai 1976; Wang and Ramdas 2023, "Anytime-valid t-tests and
confidence sequences for Gaussian means with unknown variance"): with the standardised change ``theta / sigma``
drawn from ``N(0, g)`` under the alternative and the right-Haar prior on the three nuisance means and ``sigma``,
the Bayes factor of ``theta = theta_0`` is the likelihood ratio of the data's maximal invariant, a martingale under
the null, and in closed form

    M(theta_0) = sqrt(k / (k + g)) * ((R + D^2 / k) / (R + D^2 / (k + g)))^((nu + 1) / 2),

with ``D`` the estimate less ``theta_0``, ``R`` the pooled within-group sum of squares and ``nu`` its degrees of
freedom. The sequence is ``{theta_0 : M(theta_0) < 1 / alpha}``, an interval around the estimate solved exactly.
The model's assumptions: log throughput is normal with one noise level for both configurations then and now (the
pooled variance; with the sides' counts near equal, as a recheck's are, a noise that differs between them moves
the variance of the difference little). ``python -m autotune.bench.recheck`` measures what the whole rule holds on
the simulator and the ``cmd`` engine (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

__all__ = ["MIXTURE_G", "ChangeSequence", "change_sequence", "ratio_sequence", "rounds_for_change",
           "rounds_to_decide"]

#: Prior variance of the standardised change under the alternative. Empirical: 8 (a change of about 2.8 noise
#: standard deviations, 8-25% at the 3-8% restart noise of the simulator and the H200 series) keeps the sequence
#: within 3.2-3.7 standard errors of the difference from the first round to the twentieth for stored verifications
#: of 3 to 8 restarts a side; a smaller one widens the early looks without bound, a larger one every later look.
MIXTURE_G = 8.0


@dataclasses.dataclass(frozen=True)
class ChangeSequence:
    """Where the change stands at one look, on the log scale (``exp`` gives the ratio of today's speedup to the
    stored one).

    Attributes:
        estimate: The difference of the two log-ratios.
        low, high: The confidence sequence at this look (``-inf``/``inf``: not bounded yet).
        se: Standard error of ``estimate`` (pooled noise times ``sqrt(k)``).
        sigma: The pooled noise of one restart's log throughput.
        k: The sum of the four groups' reciprocal counts.
        dof: Degrees of freedom of the pooled noise.
    """

    estimate: float
    low: float
    high: float
    se: float
    sigma: float
    k: float
    dof: int


def _half_width(k: float, sse: float, dof: int, alpha: float, g: float) -> float:
    """The sequence's half-width: the ``|D|`` at which ``M`` reaches ``1 / alpha`` (``inf`` when it never does)."""
    if dof <= 0:
        return math.inf
    if sse <= 0.0:
        return 0.0  # no spread at all: the difference is exact
    ratio_max = (k + g) / k  # the limit of the bracket as |D| grows
    q = ((1.0 / alpha) * math.sqrt(ratio_max)) ** (2.0 / (dof + 1))
    if q >= ratio_max:
        return math.inf
    x = (q - 1.0) / (1.0 / k - q / (k + g))  # D^2 / R at the boundary
    return math.sqrt(x * sse)


def _log_groups(groups: Sequence[Sequence[float]]) -> list[list[float]]:
    return [[math.log(float(v)) for v in grp if float(v) > 0.0 and math.isfinite(float(v))] for grp in groups]


def _contrast(groups: Sequence[Sequence[float]], signs: Sequence[float], alpha: float,
              g: float) -> ChangeSequence | None:
    logs = _log_groups(groups)
    if any(not grp for grp in logs):
        return None
    means = [sum(grp) / len(grp) for grp in logs]
    estimate = sum(s * m for s, m in zip(signs, means))
    k = sum(1.0 / len(grp) for grp in logs)
    dof = sum(len(grp) for grp in logs) - len(logs)
    sse = sum((x - m) ** 2 for grp, m in zip(logs, means) for x in grp)
    sigma = math.sqrt(sse / dof) if dof > 0 else math.nan
    half = _half_width(k, sse, dof, alpha, g)
    return ChangeSequence(estimate, estimate - half, estimate + half, sigma * math.sqrt(k), sigma, k, dof)


def change_sequence(then_challenger: Sequence[float], then_baseline: Sequence[float],
                    now_challenger: Sequence[float], now_baseline: Sequence[float], alpha: float = 0.05,
                    g: float = MIXTURE_G) -> ChangeSequence | None:
    """The confidence sequence for the change of the challenger's speedup over the baseline, then against now,
    from each group's throughputs (positive numbers; others are left out). ``None`` while a group is empty."""
    return _contrast((then_challenger, then_baseline, now_challenger, now_baseline), (-1.0, 1.0, 1.0, -1.0),
                     alpha, g)


def ratio_sequence(challenger: Sequence[float], baseline: Sequence[float], alpha: float = 0.05,
                   g: float = MIXTURE_G) -> ChangeSequence | None:
    """The same sequence for one log-ratio, the challenger over the baseline (today's speedup alone)."""
    return _contrast((challenger, baseline), (1.0, -1.0), alpha, g)


def rounds_to_decide(then_counts: tuple[int, int], now_counts: tuple[int, int], estimate: float, sigma: float,
                     margin: float, alpha: float = 0.05, g: float = MIXTURE_G, most: int = 200) -> int | None:
    """How many more rounds (one restart a side each) the sequence would need, at today's estimate and noise, to
    lie wholly inside ``[-margin, margin]`` or wholly outside it; ``None`` when ``most`` rounds would not (the
    stored figure's own uncertainty is too wide for the margin, or the estimate sits on the margin)."""
    if not math.isfinite(sigma) or sigma <= 0.0:
        return None
    n_then = sum(then_counts)
    for extra in range(1, most + 1):
        counts = (*then_counts, now_counts[0] + extra, now_counts[1] + extra)
        k = sum(1.0 / n for n in counts)
        dof = n_then + now_counts[0] + now_counts[1] + 2 * extra - 4
        half = _half_width(k, sigma * sigma * dof, dof, alpha, g)
        if abs(estimate) + half <= margin or abs(estimate) - half > margin:
            return extra
    return None


def rounds_for_change(then_counts: tuple[int, int], sigma: float, change: float, margin: float,
                      alpha: float = 0.05, power: float = 0.8, g: float = MIXTURE_G, most: int = 16) -> int:
    """The rounds (a restart a side each) after which a change of ``change`` (log scale) would lie beyond
    ``margin`` with probability about ``power``, at noise ``sigma``: the fewest whose sequence half-width plus the
    power's normal quantile of standard errors is within ``|change| - margin``; ``most`` when none is."""
    if not math.isfinite(sigma) or sigma <= 0.0:
        return most
    from autotune.stats import scipy_stats

    z = float(scipy_stats().norm.ppf(power))
    n_then = sum(then_counts)
    for rounds in range(1, most + 1):
        k = sum(1.0 / n for n in then_counts) + 2.0 / rounds
        dof = n_then + 2 * rounds - 4
        half = _half_width(k, sigma * sigma * dof, dof, alpha, g)
        if half + z * sigma * math.sqrt(k) <= abs(change) - margin:
            return rounds
    return most
