"""Statistics over restarts: a trial's mean with a confidence interval, and a speedup with a verdict.

Throughput is a noisy objective: every number autotune shows is a mean over fresh engine restarts with a 95%
interval (Student's t by default, BCa bootstrap as an option), its coefficient of variation, and a
pyperf-style "unstable" flag. Comparisons between two configurations give the ratio of means with a bootstrap
interval and an explicit verdict, so a lucky restart cannot pass for a win.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from autotune.records import EngineConfig, RestartResult, config_differences

__all__ = [
    "Comparison",
    "TrialSummary",
    "UNSTABLE_CV",
    "Verdict",
    "compare",
    "format_mean",
    "interval",
    "measure_restart",
    "summarize",
]

#: Above this coefficient of variation across restarts a result is flagged unstable (pyperf warns at 10%).
UNSTABLE_CV = 0.10


class Verdict:
    """The three verdicts a comparison can give."""

    FASTER = "faster"
    NOT_SIGNIFICANT = "no significant difference"
    SLOWER = "slower"


def interval(values: Sequence[float], confidence: float = 0.95, method: str = "t") -> tuple[float, float]:
    """Confidence interval for the mean of ``values``.

    Args:
        values: Per-restart throughputs.
        confidence: Coverage, e.g. 0.95.
        method: ``"t"`` (Student's t interval) or ``"bca"`` (bias-corrected accelerated bootstrap).

    Returns:
        ``(low, high)``; ``(nan, nan)`` with fewer than two values (one restart says nothing about noise).
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return math.nan, math.nan
    mean = float(x.mean())
    if float(x.std(ddof=1)) == 0.0:
        return mean, mean
    if method == "t":
        low, high = stats.t.interval(confidence, x.size - 1, loc=mean, scale=stats.sem(x))
        return float(low), float(high)
    if method == "bca":
        res = stats.bootstrap((x,), np.mean, confidence_level=confidence, method="BCa",
                              n_resamples=2000, random_state=np.random.default_rng(0))
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    raise ValueError(f"unknown interval method {method!r}: use 't' or 'bca'")


@dataclasses.dataclass(frozen=True)
class TrialSummary:
    """What a set of restarts of one configuration says.

    Attributes:
        status: ``ok`` if every counted restart succeeded, else ``failed``.
        values: Counted per-restart throughputs (cold restarts excluded), in restart order.
        seeds: The seed of each counted value, for matched comparisons.
        mean, std, ci_low, ci_high, cv: Statistics of ``values`` (``nan`` where undefined).
        unstable: CV above :data:`UNSTABLE_CV`, or fewer than two values.
        n_cold: Cold first starts recorded but not counted.
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

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def resolved_differs(self) -> bool:
        return bool(self.differences)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["values"] = list(self.values)
        out["seeds"] = list(self.seeds)
        out["differences"] = list(self.differences)
        out["resolved_sizes"] = None if self.resolved_sizes is None else list(self.resolved_sizes)
        out["n"] = self.n
        out["resolved_differs"] = self.resolved_differs
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialSummary:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        for key in ("mean", "std", "ci_low", "ci_high", "cv"):
            kw[key] = math.nan if kw.get(key) is None else float(kw[key])
        kw["values"] = tuple(kw.get("values") or ())
        kw["seeds"] = tuple(kw.get("seeds") or ())
        kw["differences"] = tuple(kw.get("differences") or ())
        if kw.get("resolved_sizes") is not None:
            kw["resolved_sizes"] = tuple(kw["resolved_sizes"])
        return cls(**kw)

    def describe(self) -> str:
        """``mean ± std tok/s (n=…) [ci_low, ci_high]`` plus an ``unstable`` mark, pyperf style."""
        return format_mean(self.values, self.ci_low, self.ci_high, self.unstable)


def format_mean(values: Sequence[float], ci_low: float, ci_high: float, unstable: bool) -> str:
    """``mean ± std tok/s (n=…), 95% CI [low, high]`` and an explicit ``UNSTABLE`` mark."""
    if not values:
        return "no successful restarts"
    x = np.asarray(values, dtype=float)
    std = float(x.std(ddof=1)) if x.size > 1 else math.nan
    text = f"{x.mean():.1f} ± {std:.1f} tok/s (n={x.size})"
    if not math.isnan(ci_low):
        text += f", 95% CI [{ci_low:.1f}, {ci_high:.1f}]"
    if unstable:
        text += "  UNSTABLE"
    return text


def summarize(
    config: EngineConfig,
    restarts: Iterable[RestartResult],
    confidence: float = 0.95,
    method: str = "t",
) -> TrialSummary:
    """Summarise a configuration's restarts: counted values, interval, CV, silent changes, failures."""
    restarts = list(restarts)
    counted = [r for r in restarts if r.ok and not r.cold]
    failed = [r for r in restarts if not r.ok]
    values = tuple(float(r.value) for r in counted)  # type: ignore[arg-type]
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
    last_ok = next((r for r in reversed(restarts) if r.ok and r.resolved is not None), None)
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
        n_cold=sum(1 for r in restarts if r.ok and r.cold),
        n_failed=len(failed),
        failure=failed[0].error if failed else None,
        accept_len=float(np.mean(accepts)) if accepts else None,
        startup_s=float(np.mean(startups)) if startups else None,
        differences=tuple(diffs),
        resolved_mode=None if last_ok is None else last_ok.resolved.cudagraph_mode,  # type: ignore[union-attr]
        resolved_sizes=None if last_ok is None else last_ok.resolved.cudagraph_capture_sizes,  # type: ignore[union-attr]
    )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A challenger against a reference: ratio of mean throughputs with a bootstrap interval and a verdict.

    Attributes:
        speedup: mean(challenger) / mean(reference).
        ci_low, ci_high: Bootstrap interval of the speedup at ``confidence``.
        p_value: Welch's t-test on log throughput (two-sided).
        confidence: The interval's coverage (already corrected for ``comparisons`` by Bonferroni).
        comparisons: How many challengers were compared against the same reference.
        verdict: One of :class:`Verdict`.
    """

    speedup: float
    ci_low: float
    ci_high: float
    p_value: float
    confidence: float
    comparisons: int
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        kw = dict(data)
        for key in ("speedup", "ci_low", "ci_high", "p_value"):
            kw[key] = math.nan if kw.get(key) is None else float(kw[key])
        return cls(**kw)

    def describe(self) -> str:
        if math.isnan(self.ci_low):
            return f"{self.speedup:.2f}x (too few restarts for an interval) - {self.verdict}"
        return f"{self.speedup:.2f}x [{self.ci_low:.2f}, {self.ci_high:.2f}] - {self.verdict}"


def _ratio_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def compare(
    challenger: Sequence[float],
    reference: Sequence[float],
    alpha: float = 0.05,
    comparisons: int = 1,
    n_resamples: int = 4000,
    seed: int = 0,
) -> Comparison:
    """Speedup of ``challenger`` over ``reference`` with a bootstrap interval and a verdict.

    The interval resamples restarts of each side independently (percentile bootstrap of the ratio of means).
    With ``comparisons`` challengers tested against one reference the level is Bonferroni-corrected, so
    picking the best of several cannot manufacture a win. "faster"/"slower" needs both the interval to
    exclude 1 and Welch's t-test on log throughput to reject at the same corrected level: with three or
    four restarts a bootstrap interval alone is too narrow to trust.

    Args:
        challenger: Per-restart throughputs of the challenger.
        reference: Per-restart throughputs of the reference (the baseline).
        alpha: Family-wise error rate.
        comparisons: Number of challengers compared against the same reference.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed (results are reproducible).
    """
    a = np.asarray(challenger, dtype=float)
    b = np.asarray(reference, dtype=float)
    level = alpha / max(1, comparisons)
    confidence = 1.0 - level
    speedup = float(a.mean() / b.mean()) if a.size and b.size else math.nan
    if a.size < 2 or b.size < 2:
        return Comparison(speedup, math.nan, math.nan, math.nan, confidence, comparisons, Verdict.NOT_SIGNIFICANT)
    res = stats.bootstrap((a, b), _ratio_of_means, vectorized=True, paired=False, confidence_level=confidence,
                          method="percentile", n_resamples=n_resamples, random_state=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    la, lb = np.log(a), np.log(b)
    if la.std() == 0 and lb.std() == 0:
        p = 0.0 if la.mean() != lb.mean() else 1.0
    else:
        p = float(stats.ttest_ind(la, lb, equal_var=False).pvalue)
    significant = p < level
    if significant and low > 1.0:
        verdict = Verdict.FASTER
    elif significant and high < 1.0:
        verdict = Verdict.SLOWER
    else:
        verdict = Verdict.NOT_SIGNIFICANT
    return Comparison(speedup, low, high, p, confidence, comparisons, verdict)


def measure_restart(
    engine: Any,
    config: EngineConfig,
    workload: Any,
    *,
    restart: int,
    seed: int,
    on_result: Callable[[RestartResult], None] | None = None,
) -> list[RestartResult]:
    """One counted restart of ``config``, preceded by a warm-up restart when the engine reports it cold.

    A cold restart (the first start of a configuration, with empty compile caches) ran 30-60% slow on the
    H200. It is kept in the record but never counted: the same seed is run again warm, so racing and
    verification compare warm restarts on matched seeds.

    Returns:
        The restarts run (one, or a cold one followed by a warm one), in order.
    """
    results = []
    for _ in range(2):
        result = engine.run_restart(config, workload, restart=restart, seed=seed)
        results.append(result)
        if on_result is not None:
            on_result(result)
        if not (result.ok and result.cold):
            break
    return results

