"""Restart noise for planning: a prior that cannot collapse onto two lucky restarts.

On an H100 (issue 41) the baseline's two search restarts were 3409 and 3396 tok/s, 0.4% apart; the study's pooled
noise was that same pair, so the plan read "CV 0%" and sized verification at three restarts a side. The true
restart noise turned out to be 10-13%. A variance from one or two restarts says almost nothing: its 80% interval at
one degree of freedom spans a factor of 100. So the noise a plan uses is built in three layers, as limma moderates
gene-wise variances (Smyth 2004) with a prior worth real degrees of freedom:

1. **The machine's noise** (:class:`NoisePrior`): what earlier studies on this store measured on the same GPU and
   engine (their verification restarts, pooled), or, with none, :data:`DEFAULT_CV`. It is worth
   :data:`MACHINE_PRIOR_DF` degrees of freedom (or what the earlier studies measured, if fewer).
2. **The study's noise** (:func:`study_prior`): every configuration's counted search restarts, pooled, moderated
   by the machine's prior.
3. **Each side's noise** (:func:`planning_noise`): its own search restarts moderated by the study's, worth
   :data:`SIDE_PRIOR_DF`, and then read at an upper credible value (:data:`PLAN_QUANTILE` of the scaled inverse
   chi-square posterior), not at its point estimate: a plan sized for the noise's upper range keeps its power when
   the noise is larger than the few restarts showed, and a variance of two equal restarts can never plan below the
   prior it was pulled toward.

Empirical choices (none tuned to a simulator profile): :data:`MACHINE_PRIOR_DF` and :data:`SIDE_PRIOR_DF` (four
degrees of freedom each: a prior worth one configuration measured five times), :data:`PLAN_QUANTILE` (0.75), and
:data:`DEFAULT_CV` (10%: pyperf's "unstable" line, and the size of the wander measured on the H100 and H200,
``docs/measurements/``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from autotune.stats import scipy_stats

__all__ = ["DEFAULT_CV", "MACHINE_PRIOR_DF", "PLAN_QUANTILE", "SIDE_PRIOR_DF", "NoisePrior", "log_variance",
           "planning_noise", "pooled_sum", "study_prior"]

#: The machine's noise before anything was recorded on it (empirical; see the module's docstring).
DEFAULT_CV = 0.10
#: The most degrees of freedom the machine's prior is worth (empirical).
MACHINE_PRIOR_DF = 4.0
#: Degrees of freedom the study's pooled noise is worth as each side's prior (empirical).
SIDE_PRIOR_DF = 4.0
#: A plan uses this quantile of the posterior of a side's variance (empirical).
PLAN_QUANTILE = 0.75


def _cv(variance: float) -> float:
    return math.sqrt(math.expm1(max(0.0, variance)))


def _var(cv: float) -> float:
    return math.log1p(cv * cv)


def log_variance(values: Sequence[float]) -> tuple[float, int]:
    """Sample variance of log ``values`` and its degrees of freedom (``(0, 0)`` with fewer than two)."""
    logs = [math.log(v) for v in values if v > 0 and math.isfinite(v)]
    if len(logs) < 2:
        return 0.0, 0
    m = sum(logs) / len(logs)
    return sum((x - m) ** 2 for x in logs) / (len(logs) - 1), len(logs) - 1


def pooled_sum(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Sum of squares of log values about each group's mean, and the degrees of freedom, over every group."""
    total, df = 0.0, 0
    for g in groups:
        var, d = log_variance(g)
        total += var * d
        df += d
    return total, df


@dataclasses.dataclass(frozen=True)
class NoisePrior:
    """A variance of log throughput per restart, what it is worth, and where it came from.

    Attributes:
        variance: Log variance of one restart.
        df: Degrees of freedom it is worth as a prior.
        source: Where it came from, for the plan line ("default 10%", "3 earlier studies on NVIDIA H100 ...").
    """

    variance: float
    df: float
    source: str

    @property
    def cv(self) -> float:
        return _cv(self.variance)

    @classmethod
    def default(cls) -> NoisePrior:
        return cls(_var(DEFAULT_CV), MACHINE_PRIOR_DF, f"default {100 * DEFAULT_CV:.0f}%, no earlier study on this machine")

    @classmethod
    def recorded(cls, groups: Sequence[Sequence[float]], where: str) -> NoisePrior:
        """The machine's noise from earlier studies' restarts, one group per (study, configuration); the default
        when they hold no two restarts of one configuration. Worth what they measured, at most
        :data:`MACHINE_PRIOR_DF`, and pulled toward the default by what is missing from that."""
        total, df = pooled_sum(groups)
        if df == 0:
            return cls.default()
        worth = min(float(df), MACHINE_PRIOR_DF)
        # Fewer than MACHINE_PRIOR_DF recorded degrees of freedom: the default fills the rest of the prior's weight.
        missing = MACHINE_PRIOR_DF - worth
        variance = (total / df * worth + _var(DEFAULT_CV) * missing) / MACHINE_PRIOR_DF
        return cls(variance, MACHINE_PRIOR_DF,
                   f"{where}: CV {100 * _cv(total / df):.0f}% over {df} degrees of freedom")


def study_prior(groups: Sequence[Sequence[float]], machine: NoisePrior) -> NoisePrior:
    """The study's noise: every configuration's counted restarts pooled (one group each), moderated by the machine's
    prior. Its worth as a side's prior is :data:`SIDE_PRIOR_DF`."""
    total, df = pooled_sum(groups)
    variance = (machine.df * machine.variance + total) / (machine.df + df)
    source = f"prior {machine.source}"
    if df:
        source += f"; this study CV {100 * _cv(total / df):.0f}% over {df} degrees of freedom"
    return NoisePrior(variance, SIDE_PRIOR_DF, source)


def planning_noise(values: Sequence[float], prior: NoisePrior, quantile: float = PLAN_QUANTILE) -> float:
    """The log variance a plan uses for a side with these counted restarts: the posterior of its variance (a scaled
    inverse chi-square with ``prior.df + n - 1`` degrees of freedom around the moderated estimate) at ``quantile``.

    A side that adds little cannot pull it below its prior: one restart plans at about 2.1 times the prior's variance,
    two equal restarts at about 1.5 times (at the defaults), so a plan cannot collapse onto a lucky pair.
    """
    var, d = log_variance(values)
    dof = prior.df + d
    if dof <= 0:
        return prior.variance
    post = (prior.df * prior.variance + d * var) / dof
    chi2 = scipy_stats().chi2
    return float(post * dof / chi2.ppf(1.0 - quantile, dof))
