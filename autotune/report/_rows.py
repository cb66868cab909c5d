"""The verification table's rows: each verified configuration's fresh restarts, its speedup against the baseline,
and the table with what stands behind its verdict (the report's typed parts, read back by ``report --from-json``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from autotune.records import encode, record
from autotune.core.records import EngineConfig, RestartResult
from autotune.decisions.planning import RestartPlan
from autotune.decisions.sequential import SequentialLook
from autotune.decisions.verification import BASELINE, VerifiedConfig
from autotune.stats.intervals import Comparison, format_mean
from autotune.stats.latency import LatencyStat, SloCheck, meets_slo, summarize_latency

__all__ = ["CompareResult", "VerificationTable", "VerifiedRow", "finite_or_none", "restart_dict"]


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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "role": self.role, "trial_number": self.trial_number,
               "config": encode(self.config), "search_mean": self.search_mean, "search_estimate": self.search_estimate,
               "shares_slot_with": list(self.shares_slot_with), "mean": self.mean, "std": self.std,
               "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n, "values": list(self.values),
               "unstable": self.unstable, "status": self.status, "failure": self.failure,
               "accept_len": self.accept_len, "differences": list(self.differences), "text": self.describe(),
               "unit": self.unit, "dropped": self.dropped,
               "restarts": [restart_dict(r) for r in self.restarts]}
        if self.speedup is not None:
            out["speedup"] = encode(self.speedup)
        out["latency"] = {k: encode(v) for k, v in self.latency.items()}
        out["slo_checks"] = [encode(c) for c in self.slo_checks]
        out["meets_slo"] = self.meets_slo
        return out


def restart_dict(r: RestartResult, counted_cold_seeds: frozenset[int] = frozenset()) -> dict[str, Any]:
    out = encode(r)
    out["value"] = r.value
    out["counted"] = bool(r.ok and (not r.cold or r.seed in counted_cold_seeds))
    return out


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

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries], "restarts_per_config": self.restarts_per_config,
                "max_restarts": self.max_restarts,
                "restarts_used": self.restarts_used, "minutes_used": self.minutes_used,
                "sequential": None if self.sequential is None else encode(self.sequential),
                "no_sequential": self.no_sequential,
                "plan": None if self.plan is None else encode(self.plan),
                "baseline_restarts": self.baseline_restarts, "extension": self.extension}
