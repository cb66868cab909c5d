"""The verification table's rows: each verified configuration's fresh restarts, its speedup against the baseline,
and the table with what stands behind its verdict (the report's typed parts, read back by ``report --from-json``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from autotune.records import record
from autotune.core.records import EngineConfig, RestartResult
from autotune.decisions.planning import RestartPlan
from autotune.decisions.sequential import SequentialLook
from autotune.decisions.verification import BASELINE, VerifiedConfig
from autotune.stats.intervals import Comparison, format_mean
from autotune.stats.latency import LatencyStat, SloCheck, meets_slo, summarize_latency

__all__ = ["CompareResult", "RestartRow", "VerificationTable", "VerifiedRow", "finite_or_none"]


def finite_or_none(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


@record(after={"p_value": "ci_high", "verdict": "comparisons"})  # the order the JSON has always had
@dataclasses.dataclass(frozen=True)
class CompareResult:
    """A verified configuration against the baseline: speedup, its interval, and the verdict (pyperf style).

    Attributes:
        speedup: mean(configuration) / mean(baseline).
        ci_low, ci_high: The speedup's interval at ``confidence`` (``None`` with too few restarts).
        confidence: The interval's coverage, Bonferroni-corrected for the number of challengers.
        verdict: ``faster``, ``no significant difference`` or ``slower``.
        p_value: Welch's t-test on log throughput.
        comparisons: Challengers compared with the same baseline.
    """

    speedup: float
    ci_low: float | None
    ci_high: float | None
    confidence: float
    verdict: str
    p_value: float | None = None
    comparisons: int = 1
    #: Rounds the comparison paired (None: unpaired, Welch on each side's restarts).
    pairs: int | None = None

    @classmethod
    def from_comparison(cls, c: Comparison) -> CompareResult:
        return cls(c.speedup, finite_or_none(c.ci_low), finite_or_none(c.ci_high), c.confidence, c.verdict,
                   finite_or_none(c.p_value), c.comparisons, c.pairs)

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None

    def oneliner(self) -> str:
        """``x1.52 [1.33, 1.66]`` (``x1.52`` without an interval)."""
        if not self.has_interval:
            return f"x{self.speedup:.2f}"
        return f"x{self.speedup:.2f} [{self.ci_low:.2f}, {self.ci_high:.2f}]"

    def interval_text(self) -> str:
        """`` [1.33, 1.66] (98.3% CI)``, or nothing without an interval."""
        if not self.has_interval:
            return ""
        family = f", Bonferroni over {self.comparisons} challengers" if self.comparisons > 1 else ""
        paired = f", paired over {self.pairs} rounds" if self.pairs is not None else ""
        return f" [{self.ci_low:.2f}, {self.ci_high:.2f}] ({self.confidence * 100:.1f}% CI{family}{paired})"


#: The row as report --json has always written it: the figures in reading order, each restart with its value and
#: whether it counted, the speedup only where there is one.
@record(leaves_out=("restarts", "resolved_mode"), omit_at_default=("speedup",),
        emits={"n": "n", "text": "describe", "meets_slo": "meets_slo", "restarts": "restart_rows"},
        after={"search_estimate": "search_mean", "shares_slot_with": "search_estimate", "n": "ci_high",
               "text": "differences", "unit": "text", "dropped": "unit", "restarts": "dropped"})
@dataclasses.dataclass(frozen=True)
class VerifiedRow:
    """One configuration of the verification table: its fresh restarts summarised, and its speedup."""

    label: str
    role: str
    trial_number: int | None
    config: EngineConfig
    search_mean: float | None
    mean: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None
    values: tuple[float, ...]
    unstable: bool
    status: str
    failure: str | None
    accept_len: float | None
    differences: tuple[str, ...]
    speedup: CompareResult | None = None
    search_estimate: float | None = None
    shares_slot_with: tuple[int, ...] = ()
    latency: Mapping[str, LatencyStat] = dataclasses.field(default_factory=dict)
    slo_checks: tuple[SloCheck, ...] = ()
    #: The runner-up or a challenger it displaced, dropped after the first round (autotune.decisions.verification.first_round_cut).
    dropped: bool = False

    @property
    def meets_slo(self) -> bool:
        """No latency limit keeps this configuration from winning (always true without limits)."""
        return meets_slo(self.slo_checks)
    #: Every verification restart of the configuration (cold and failed ones included).
    restarts: tuple[RestartResult, ...] = ()
    #: The capture mode the configuration's restarts resolved to.
    resolved_mode: str | None = None
    #: The unit of ``values`` (the study's objective: ``tok/s`` or goodput's ``req/s``).
    unit: str = "tok/s"

    @classmethod
    def from_verified(cls, entry: VerifiedConfig) -> VerifiedRow:
        s, cand = entry.summary, entry.candidate
        return cls(
            label=cand.config.label(), role=cand.role, trial_number=cand.trial_number, config=cand.config,
            search_mean=cand.search_mean, search_estimate=cand.estimate,
            shares_slot_with=tuple(cand.shares_slot_with), mean=finite_or_none(s.mean), std=finite_or_none(s.std),
            ci_low=finite_or_none(s.ci_low), ci_high=finite_or_none(s.ci_high), values=tuple(s.values),
            unstable=s.unstable, status=s.status, failure=s.failure, accept_len=s.accept_len,
            differences=tuple(s.differences),
            speedup=None if entry.comparison is None else CompareResult.from_comparison(entry.comparison),
            latency=summarize_latency(entry.restarts), slo_checks=tuple(entry.slo_checks),
            restarts=tuple(entry.restarts), resolved_mode=s.resolved_mode, unit=s.unit, dropped=entry.dropped,
        )

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def is_baseline(self) -> bool:
        return self.role == BASELINE

    def describe(self) -> str:
        """``mean ± std UNIT (n=…), 95% CI [low, high]``."""
        return format_mean(self.values, math.nan if self.ci_low is None else self.ci_low,
                           math.nan if self.ci_high is None else self.ci_high, self.unstable, self.unit)

    @property
    def restart_rows(self) -> tuple[RestartRow, ...]:
        return tuple(RestartRow.of(r) for r in self.restarts)


@record(spread="restart", leaves_out=("counted",), emits=("value", "counted"))
@dataclasses.dataclass(frozen=True)
class RestartRow:
    """A restart as the report's JSON lists it: its stored record, then its value and whether it counted."""

    restart: RestartResult
    counted: bool

    @classmethod
    def of(cls, r: RestartResult, counted_cold_seeds: frozenset[int] = frozenset()) -> RestartRow:
        """``r``'s row: it counted if it succeeded warm, or cold on a seed among ``counted_cold_seeds``."""
        return cls(r, bool(r.ok and (not r.cold or r.seed in counted_cold_seeds)))

    @property
    def value(self) -> float | None:
        return self.restart.value


@record(after={"max_restarts": "restarts_per_config"})
@dataclasses.dataclass(frozen=True)
class VerificationTable:
    entries: tuple[VerifiedRow, ...]
    restarts_per_config: int
    restarts_used: int
    minutes_used: float
    max_restarts: int | None = None
    #: The sequential design at the conclusion (autotune.decisions.sequential.SequentialLook); None: fixed design.
    sequential: SequentialLook | None = None
    #: Why the verdict is open and what would close it (:func:`~autotune.report._verdict.open_verdict_note`);
    #: None when it is settled.
    no_sequential: str | None = None
    #: The restarts each side was planned from the search's noise (None: the fixed design).
    plan: RestartPlan | None = None
    #: Counted restarts of the baseline in the common rounds (None: as every configuration's).
    baseline_restarts: int | None = None
    #: Which extension concluded this verification (0: the first conclusion).
    extension: int = 0
