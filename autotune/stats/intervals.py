"""Statistics over restarts: a trial's mean with a confidence interval, and a speedup with a verdict.

Throughput is a noisy objective: every number autotune shows is a mean over fresh engine restarts with a 95%
interval, its coefficient of variation, and a pyperf-style "unstable" flag. Comparisons between two
configurations give the ratio of means with an interval and an explicit verdict, so a lucky restart cannot
pass for a win.

Restart noise is multiplicative (a restart lands on another kernel selection, clock or memory layout, which
scales throughput), so both intervals are computed on log throughput and mapped back: they stay positive at
any spread, and a speedup interval is symmetric in ratio terms. With two to six restarts per side the levels
hold on lognormal and on normal noise from 3% to 15% CV: ``python -m autotune.bench.coverage`` measures them
(table in docs/benchmarks.md) and tests/stats/test_intervals.py keeps them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from autotune.core.records import EngineConfig, RestartResult, config_differences
from autotune.records import record
from autotune.stats import scipy_stats

#: One side's restarts: as the callers hold them, or already an array (compare() converts once and passes it on).
Samples = Sequence[float] | NDArray[np.float64]

__all__ = [
    "Comparison",
    "PairPrior",
    "TrialSummary",
    "UNSTABLE_CV",
    "Verdict",
    "compare",
    "compare_paired",
    "format_mean",
    "interval",
    "log_ratio_interval",
    "matched_pairs",
    "paired_log_ratio_interval",
    "shrunk_means",
    "summarize",
]

#: Above this coefficient of variation across restarts a result is flagged unstable (pyperf warns at 10%).
UNSTABLE_CV = 0.10


class Verdict:
    """The verdicts a comparison can give (its interval against 1), and the two a study's answer adds.

    A comparison's own verdict reads only its interval: ``faster``/``slower`` when it excludes 1, else
    ``no significant difference``. A study never stops at that: its answer (:attr:`Verification.answer
    <autotune.decisions.verification.Verification.answer>`) is ``faster``, ``slower``, ``equivalent`` (the interval
    lies inside the equivalence margin) or ``undecided`` (with what more rounds would likely give).
    """

    FASTER = "faster"
    NOT_SIGNIFICANT = "no significant difference"
    SLOWER = "slower"
    EQUIVALENT = "equivalent"
    UNDECIDED = "undecided"


@functools.lru_cache(maxsize=1024)
def _t_quantile(q: float, df: float) -> float:
    # Degrees of freedom are whole numbers here and levels few, so each quantile is computed once per process.
    return float(scipy_stats().t.ppf(q, df))


def _log_moments(x: np.ndarray) -> tuple[float, float]:
    """Cox's estimate of log(mean) for lognormal data and its variance: ``m + s^2/2``, ``s^2/n + s^4/(2(n-1))``.

    The mean of log throughput estimates the log of the geometric mean, which lies ``s^2/2`` below the log of the
    arithmetic mean that users (and the simulator's ground truth) mean by "throughput". At 15% CV that is 1.1%,
    a fifth of a six-restart interval's half-width; Cox's correction removes it at the cost of the small
    ``s^4`` term in the variance (Zhou and Gao, Statistics in Medicine 16, 1997).
    """
    logs = np.log(x)
    n = logs.size
    s2 = float(logs.var(ddof=1))
    return float(logs.mean()) + s2 / 2.0, s2 / n + s2 * s2 / (2.0 * (n - 1))


def interval(values: Sequence[float], confidence: float = 0.95, method: str = "t") -> tuple[float, float]:
    """Confidence interval for the mean of ``values`` (throughputs, so positive).

    Args:
        values: Per-restart throughputs.
        confidence: Coverage, e.g. 0.95.
        method: ``"t"`` (Student's t on log throughput, Cox's method for the mean) or ``"bca"``
            (bias-corrected accelerated bootstrap of the mean).

    Returns:
        ``(low, high)``, with ``0 < low`` always; ``(nan, nan)`` with fewer than two values (one restart says
        nothing about noise) or a non-positive value (not a throughput).
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)) or float(x.min()) <= 0.0:
        return math.nan, math.nan
    mean = float(x.mean())
    if float(x.std(ddof=1)) == 0.0:
        return mean, mean
    if method == "t":
        # An arithmetic t interval at n=2 spans +-12.7 standard errors and went negative (`CI [-47.3, 600.5]`
        # tok/s); on the log scale the same t quantile multiplies and divides instead.
        centre, var = _log_moments(x)
        half = _t_quantile(0.5 + confidence / 2.0, x.size - 1) * math.sqrt(var)
        return _exp(centre - half), _exp(centre + half)
    if method == "bca":
        res = scipy_stats().bootstrap((x,), np.mean, confidence_level=confidence, method="BCa",
                                      n_resamples=2000, random_state=np.random.default_rng(0))
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    raise ValueError(f"unknown interval method {method!r}: use 't' or 'bca'")


def _exp(x: float) -> float:
    """``exp(x)``, ``inf`` past float range: at a very high level with few restarts (a sequential design's early
    look, 99.997% on two restarts a side) the t quantile is in the thousands, and the honest bound is unbounded."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def log_ratio_interval(
    challenger: Samples, reference: Samples, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Interval for mean(challenger) / mean(reference) from each side's own restarts: ``(low, high, p_value)``.

    Welch's t on the difference of log means (Cox-corrected as in :func:`interval`), with the
    Welch-Satterthwaite degrees of freedom rounded down to an integer. Unrounded, they overstate what a side
    with three restarts knows when its spread dominates (coverage 93-94% at a 95% claim with 3 and 6 restarts
    of unequal spread); rounded down they hold the level in every cell of the coverage benchmark while staying
    close to Welch's width at equal spread. ``p_value`` is the two-sided test of "no difference" on the same
    statistic, so ``p < 1 - confidence`` exactly when the interval excludes 1.

    Returns:
        ``(nan, nan, nan)`` with fewer than two positive values on either side.
    """
    a = np.asarray(challenger, dtype=float)
    b = np.asarray(reference, dtype=float)
    if a.size < 2 or b.size < 2 or min(float(a.min()), float(b.min())) <= 0.0:
        return math.nan, math.nan, math.nan
    (ca, wa), (cb, wb) = _log_moments(a), _log_moments(b)
    diff = ca - cb
    va, vb = float(np.log(a).var(ddof=1)) / a.size, float(np.log(b).var(ddof=1)) / b.size
    se = math.sqrt(wa + wb)
    if va + vb == 0.0:  # no spread on either side: the ratio is exact
        return math.exp(diff), math.exp(diff), 0.0 if diff != 0.0 else 1.0
    df = max(1.0, math.floor((va + vb) ** 2 / (va * va / (a.size - 1) + vb * vb / (b.size - 1))))
    half = _t_quantile(0.5 + confidence / 2.0, df) * se
    p = float(2.0 * scipy_stats().t.sf(abs(diff) / se, df))
    return _exp(diff - half), _exp(diff + half), p


def matched_pairs(challenger: Sequence[RestartResult], reference: Sequence[RestartResult]
                  ) -> tuple[list[float], list[float]]:
    """The counted values of ``challenger`` and ``reference`` on matched seeds, as two aligned lists.

    A verification round runs every configuration on the round's seed, a minute or two apart: restarts close in time
    share the machine's level (on an H100 the level wandered ~10% over minutes and log throughput of a round's two
    restarts correlated 0.54, issue 41), so a round is a block and its pair is the unit of analysis. A round where
    either side has no counted restart (a failure, a budget cut, a side not scheduled) gives no pair; that loss is
    independent of the values, so the pairs that remain keep the level. A seed seen twice on one side pairs in
    order (a resumed round that ran again).
    """
    ref: dict[int, list[float]] = {}
    for r in reference:
        if r.ok and not r.cold and r.value:
            ref.setdefault(r.seed, []).append(float(r.value))
    a: list[float] = []
    b: list[float] = []
    used: dict[int, int] = {}
    for r in challenger:
        if not (r.ok and not r.cold and r.value):
            continue
        k = used.get(r.seed, 0)
        if k < len(ref.get(r.seed, ())):
            a.append(float(r.value))
            b.append(ref[r.seed][k])
            used[r.seed] = k + 1
    return a, b


@dataclasses.dataclass(frozen=True)
class PairPrior:
    """What the machine's and the search's restarts say of a round's log-ratio variance before verification ran.

    A paired interval from three rounds rests on a variance of two degrees of freedom: three ratios that agree by
    luck give a narrow, wrong interval (seen on the simulator's drifting machine, docs/benchmarks.md). As limma
    moderates gene-wise variances (Smyth 2004), the rounds' variance is pulled toward this prior, which is worth
    ``df`` degrees of freedom, and the t quantile gets them too. The prior is fixed before the rounds are read
    (the plan stores it), so the moderated t keeps its level where the prior is right or too large.

    Attributes:
        variance: Prior log-ratio variance of one round (the plan uses both sides' restart variance summed: no
            credit for the correlation a round gives, so where rounds correlate it errs wide).
        df: Degrees of freedom it is worth.
    """

    variance: float
    df: float

    def __post_init__(self) -> None:
        if not (self.variance > 0.0 and math.isfinite(self.variance) and self.df >= 0.0 and math.isfinite(self.df)):
            raise ValueError(f"a pair prior needs a positive variance and degrees of freedom, not {self}")

    def moderate(self, variance: float, df: float) -> tuple[float, float]:
        """``variance`` of ``df`` degrees of freedom pulled toward this prior: the moderated variance and its degrees
        of freedom (the prior's added)."""
        if self.df <= 0.0:
            return variance, df
        return (self.df * self.variance + df * variance) / (self.df + df), df + self.df


def paired_log_ratio_interval(challenger: Samples, reference: Samples, confidence: float = 0.95,
                              prior: PairPrior | None = None) -> tuple[float, float, float]:
    """Interval for the ratio of ``challenger`` to ``reference`` from aligned pairs (one pair a round):
    ``(low, high, p_value)``.

    The one-sample t on the within-pair log ratios ``d_r = log a_r - log b_r``, ``n - 1`` degrees of freedom. A level
    shift of the machine that hits both restarts of a round cancels in ``d_r``; what is left is each restart's own
    noise. It estimates the ratio of geometric means, which equals the ratio of arithmetic means when both sides'
    log spreads are alike (the Cox term of :func:`log_ratio_interval` is half their difference, below 0.5% at 10% CV
    a side). ``p_value`` is the two-sided test of no difference on the same statistic.

    ``prior``: the rounds' variance moderated by it (:class:`PairPrior`), ``n - 1 + prior.df`` degrees of freedom.

    Returns:
        ``(nan, nan, nan)`` with fewer than two pairs or a non-positive value.
    """
    a = np.asarray(challenger, dtype=float)
    b = np.asarray(reference, dtype=float)
    if a.size != b.size:
        raise ValueError(f"paired values need equal lengths, not {a.size} and {b.size}")
    if a.size < 2 or min(float(a.min()), float(b.min())) <= 0.0:
        return math.nan, math.nan, math.nan
    d = np.log(a) - np.log(b)
    mean, n = float(d.mean()), d.size
    var, df = float(d.var(ddof=1)), float(n - 1)
    if prior is not None:
        var, df = prior.moderate(var, df)
    if var == 0.0:
        return math.exp(mean), math.exp(mean), 0.0 if mean != 0.0 else 1.0
    se = math.sqrt(var / n)
    half = _t_quantile(0.5 + confidence / 2.0, df) * se
    p = float(2.0 * scipy_stats().t.sf(abs(mean) / se, df))
    return _exp(mean - half), _exp(mean + half), p


def shrunk_means(groups: Sequence[Sequence[float]]) -> list[float]:
    """Each group's mean throughput shrunk toward the others' by its own noise (empirical Bayes, log scale).

    The search's best raw mean is the luckiest of many noisy means: a configuration seen once at +2 standard
    deviations outranks one seen four times at its true value. Treating each configuration's true log
    throughput as drawn around a common centre with spread ``tau`` (estimated from the spread of the group
    means beyond what restart noise explains), the posterior mean moves a group's mean toward the centre by
    ``noise^2/n / (tau^2 + noise^2/n)``: a lot for one restart under heavy noise, little for six restarts in a
    widely spread landscape. Restart noise is pooled over every group with two or more restarts.

    Returns:
        Geometric-mean estimates in the order of ``groups``; the raw geometric means when the noise or the
        spread cannot be estimated (no group with two restarts, fewer than three groups).
    """
    logs = [np.log(np.asarray(g, dtype=float)) for g in groups]
    means = np.array([float(g.mean()) for g in logs])
    sizes = np.array([g.size for g in logs], dtype=float)
    df = int(sum(g.size - 1 for g in logs))
    if df == 0 or len(logs) < 3:
        return [math.exp(m) for m in means]
    noise2 = sum(float(((g - g.mean()) ** 2).sum()) for g in logs) / df
    tau2 = max(0.0, float(means.var(ddof=1)) - float(np.mean(noise2 / sizes)))
    if tau2 == 0.0:
        return [math.exp(float(means.mean()))] * len(logs)
    weights = 1.0 / (tau2 + noise2 / sizes)
    centre = float((weights * means).sum() / weights.sum())
    shrink = tau2 / (tau2 + noise2 / sizes)
    return [math.exp(centre + float(k) * (m - centre)) for k, m in zip(shrink, means)]


@record(emits=("n", "resolved_differs"))
@dataclasses.dataclass(frozen=True)
class TrialSummary:
    """What a set of restarts of one configuration says.

    Attributes:
        status: ``ok`` if every counted restart succeeded, else ``failed``.
        values: Counted per-restart throughputs (cold restarts excluded), in restart order.
        seeds: The seed of each counted value, for matched comparisons.
        mean, std, ci_low, ci_high, cv: Statistics of ``values`` (``nan`` where undefined).
        unstable: CV above :data:`UNSTABLE_CV`, or fewer than two values.
        n_cold: Cold first starts recorded but not counted (a counted one is in ``values``).
        n_failed: Restarts that failed or timed out.
        failure: The first failure's one-line reason.
        accept_len: Mean acceptance length over counted restarts, when speculating.
        startup_s: Mean start-up seconds.
        differences: Human lines "field: configured X -> resolved Y", one per distinct silent change.
        resolved_mode, resolved_sizes: What the engine ran (from the last ok restart).
    """

    status: str
    values: tuple[float, ...]
    seeds: tuple[int, ...]
    mean: float
    std: float
    ci_low: float
    ci_high: float
    cv: float
    unstable: bool
    n_cold: int = 0
    n_failed: int = 0
    failure: str | None = None
    accept_len: float | None = None
    startup_s: float | None = None
    differences: tuple[str, ...] = ()
    resolved_mode: str | None = None
    resolved_sizes: tuple[int, ...] | None = None
    unit: str = "tok/s"

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def resolved_differs(self) -> bool:
        return bool(self.differences)

    def describe(self) -> str:
        """``mean ± std UNIT (n=…) [ci_low, ci_high]`` plus an ``unstable`` mark, pyperf style."""
        return format_mean(self.values, self.ci_low, self.ci_high, self.unstable, self.unit)


def format_mean(values: Sequence[float], ci_low: float, ci_high: float, unstable: bool, unit: str = "tok/s") -> str:
    """``mean ± std UNIT (n=…), 95% CI [low, high]`` and an explicit ``UNSTABLE`` mark."""
    if not values:
        return "no successful restarts"
    x = np.asarray(values, dtype=float)
    std = float(x.std(ddof=1)) if x.size > 1 else math.nan
    digits = 1 if unit == "tok/s" else 3  # goodput: a few requests/s need decimals to differ
    text = f"{x.mean():.{digits}f} ± {std:.{digits}f} {unit} (n={x.size})"
    if not math.isnan(ci_low):
        text += f", 95% CI [{ci_low:.{digits}f}, {ci_high:.{digits}f}]"
    if unstable:
        text += "  UNSTABLE"
    return text


def summarize(
    config: EngineConfig,
    restarts: Iterable[RestartResult],
    confidence: float = 0.95,
    method: str = "t",
    unit: str = "tok/s",
    counts: Callable[[RestartResult], bool] | None = None,
) -> TrialSummary:
    """Summarise a configuration's restarts: counted values (in ``unit``), interval, CV, silent changes, failures.

    ``counts`` says which successful restarts count (default: every warm one); a study that found its cold starts
    no different from warm ones (:mod:`autotune.stats.coldstart`) passes one that counts a converged cold start too.
    """
    restarts = list(restarts)
    counted = [r for r in restarts if r.ok and (counts(r) if counts is not None else not r.cold)]
    failed = [r for r in restarts if not r.ok]
    values = tuple(r.measured() for r in counted)
    x = np.asarray(values, dtype=float)
    mean = float(x.mean()) if x.size else math.nan
    std = float(x.std(ddof=1)) if x.size > 1 else math.nan
    low, high = interval(values, confidence, method)
    cv = std / mean if x.size > 1 and mean > 0 else math.nan
    diffs: list[str] = []
    for r in restarts:
        for d in config_differences(config, r.resolved):
            if str(d) not in diffs:
                diffs.append(str(d))
    accepts = [r.accept_len for r in counted if r.accept_len is not None]
    startups = [r.startup_s for r in restarts if r.startup_s is not None]
    last_resolved = next((r.resolved for r in reversed(restarts) if r.ok and r.resolved is not None), None)
    return TrialSummary(
        status="failed" if failed else "ok",
        values=values,
        seeds=tuple(r.seed for r in counted),
        mean=mean,
        std=std,
        ci_low=low,
        ci_high=high,
        cv=cv,
        unstable=bool(x.size < 2 or (not math.isnan(cv) and cv > UNSTABLE_CV)),
        n_cold=sum(1 for r in restarts if r.ok and r.cold and not any(r is c for c in counted)),
        n_failed=len(failed),
        failure=failed[0].error if failed else None,
        accept_len=float(np.mean(accepts)) if accepts else None,
        startup_s=float(np.mean(startups)) if startups else None,
        differences=tuple(diffs),
        resolved_mode=None if last_resolved is None else last_resolved.cudagraph_mode,
        resolved_sizes=None if last_resolved is None else last_resolved.cudagraph_capture_sizes,
        unit=unit,
    )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A challenger against a reference: ratio of mean throughputs with an interval and a verdict.

    Attributes:
        speedup: mean(challenger) / mean(reference).
        ci_low, ci_high: Interval of the speedup at ``confidence`` (:func:`log_ratio_interval`).
        p_value: Two-sided p-value of the same Welch statistic on log throughput.
        confidence: The interval's coverage, already Bonferroni-corrected for ``comparisons``.
        comparisons: How many challengers were compared against the same reference.
        verdict: One of :class:`Verdict`; ``faster``/``slower`` exactly when the interval excludes 1.
        pairs: Rounds paired in the analysis (:func:`compare_paired`); ``None``: the two sides' restarts were
            compared unpaired (Welch, :func:`compare`).
    """

    speedup: float
    ci_low: float
    ci_high: float
    p_value: float
    confidence: float
    comparisons: int
    verdict: str
    pairs: int | None = None

    def describe(self) -> str:
        if math.isnan(self.ci_low):
            return f"{self.speedup:.2f}x (too few restarts for an interval) - {self.verdict}"
        return f"{self.speedup:.2f}x [{self.ci_low:.2f}, {self.ci_high:.2f}] - {self.verdict}"


def compare(
    challenger: Sequence[float],
    reference: Sequence[float],
    alpha: float = 0.05,
    comparisons: int = 1,
) -> Comparison:
    """Speedup of ``challenger`` over ``reference`` with an interval and a verdict.

    The interval is :func:`log_ratio_interval` (Welch on log throughput). With ``comparisons`` challengers
    tested against one reference the level is Bonferroni-corrected (each interval at ``1 - alpha/comparisons``),
    so picking the best of several cannot manufacture a win. The verdict reads the interval: "faster" only when
    it lies wholly above 1, "slower" only when wholly below.

    Args:
        challenger: Per-restart throughputs of the challenger.
        reference: Per-restart throughputs of the reference (the baseline).
        alpha: Family-wise error rate.
        comparisons: Number of challengers compared against the same reference.
    """
    a = np.asarray(challenger, dtype=float)
    b = np.asarray(reference, dtype=float)
    confidence = 1.0 - alpha / max(1, comparisons)
    speedup = float(a.mean() / b.mean()) if a.size and b.size else math.nan
    low, high, p = log_ratio_interval(a, b, confidence)
    if low > 1.0:
        verdict = Verdict.FASTER
    elif high < 1.0:
        verdict = Verdict.SLOWER
    else:  # the interval holds 1, or there is none (fewer than two restarts a side)
        verdict = Verdict.NOT_SIGNIFICANT
    return Comparison(speedup, low, high, p, confidence, comparisons, verdict)


def _verdict_of(low: float, high: float) -> str:
    if low > 1.0:
        return Verdict.FASTER
    if high < 1.0:
        return Verdict.SLOWER
    return Verdict.NOT_SIGNIFICANT  # the interval holds 1, or there is none


def compare_paired(
    challenger: Sequence[float],
    reference: Sequence[float],
    alpha: float = 0.05,
    comparisons: int = 1,
    prior: PairPrior | None = None,
) -> Comparison:
    """Speedup of ``challenger`` over ``reference`` from aligned pairs (:func:`matched_pairs`): the within-round
    analysis (:func:`paired_log_ratio_interval`, its variance moderated by ``prior``), Bonferroni over
    ``comparisons`` as :func:`compare`.

    The speedup is the geometric mean of the pairs' ratios, the centre of the interval.
    """
    confidence = 1.0 - alpha / max(1, comparisons)
    a = np.asarray(challenger, dtype=float)
    b = np.asarray(reference, dtype=float)
    speedup = (float(np.exp(np.mean(np.log(a) - np.log(b)))) if a.size and a.size == b.size
               and min(float(a.min()), float(b.min())) > 0.0 else math.nan)
    low, high, p = paired_log_ratio_interval(a, b, confidence, prior)
    return Comparison(speedup, low, high, p, confidence, comparisons, _verdict_of(low, high), pairs=int(a.size))
