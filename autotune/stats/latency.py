"""Latency over restarts, and the service-level objectives a configuration must meet to count.

Each restart reports request latencies (``ttft_p99_ms`` ... in :attr:`RestartResult.latency`). A configuration's
latency is the mean over its counted restarts of each restart's percentile, with a Student's t interval like
throughput's. Against a space's ``slo:`` limits each limit is then:

* ``meets``     - the interval lies at or below the limit;
* ``misses``    - the interval lies above it (the configuration cannot win);
* ``uncertain`` - the interval straddles it: the mean decides (a mean above the limit cannot win either), and the
  report marks it, because more restarts could tip it;
* ``unmeasured`` - the engine reported no such latency: it cannot be shown to meet the limit, so it cannot win.

The search sees the same rule through Optuna's constraints (``Trial.set_constraint``): one value per limit,
``mean / limit - 1`` (at most 0 when the mean meets it, 1 when unmeasured), so TPE models feasibility and Optuna
records it on every trial.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from autotune.stats.intervals import interval
from autotune.records import record
from autotune.core.records import RestartResult

__all__ = [
    "LatencyStat",
    "SloCheck",
    "check_slo",
    "constraint_values",
    "meets_slo",
    "summarize_latency",
]

MEETS, MISSES, UNCERTAIN, UNMEASURED = "meets", "misses", "uncertain", "unmeasured"
#: What an unmeasured limit contributes to Optuna's constraints: plainly infeasible.
_UNMEASURED_VIOLATION = 1.0


@dataclasses.dataclass(frozen=True)
class LatencyStat:
    """One latency figure over a configuration's counted restarts: mean of per-restart values and its interval."""

    mean: float
    ci_low: float
    ci_high: float
    n: int


def summarize_latency(restarts: Iterable[RestartResult], confidence: float = 0.95) -> dict[str, LatencyStat]:
    """Every latency figure the counted (warm, successful) restarts all report, with its interval."""
    counted = [r for r in restarts if r.ok and not r.cold and r.latency]
    if not counted:
        return {}
    keys = set.intersection(*(set(r.latency) for r in counted))
    out = {}
    for key in sorted(keys):
        values = [float(r.latency[key]) for r in counted]
        low, high = interval(values, confidence)
        out[key] = LatencyStat(float(np.mean(values)), low, high, len(values))
    return out


@record(emits=("fails",))
@dataclasses.dataclass(frozen=True)
class SloCheck:
    """One limit against one configuration's latency."""

    key: str
    limit_ms: float
    status: str
    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def fails(self) -> bool:
        """True when this limit keeps the configuration from winning (missed, mean above it, or unmeasured)."""
        return self.status in (MISSES, UNMEASURED) or (self.mean is not None and self.mean > self.limit_ms)

    def describe(self) -> str:
        """``ttft_p99_ms 512 > 400 (misses)`` style, one phrase."""
        if self.mean is None:
            return f"{self.key}: not measured (limit {self.limit_ms:g})"
        rel = ">" if self.mean > self.limit_ms else "<="
        ci = "" if self.ci_low is None else f" [{self.ci_low:.1f}, {self.ci_high:.1f}]"
        return f"{self.key} {self.mean:.1f}{ci} {rel} {self.limit_ms:g} ({self.status})"


def check_slo(latency: Mapping[str, LatencyStat], slo: Mapping[str, float]) -> list[SloCheck]:
    """Each limit of ``slo`` against ``latency`` (see the module docstring for the four outcomes)."""
    checks = []
    for key, limit in sorted(slo.items()):
        stat = latency.get(key)
        if stat is None or math.isnan(stat.mean):
            checks.append(SloCheck(key, float(limit), UNMEASURED))
            continue
        low = None if math.isnan(stat.ci_low) else stat.ci_low
        high = None if math.isnan(stat.ci_high) else stat.ci_high
        if low is not None and low > limit:
            status = MISSES
        elif high is not None and high <= limit:
            status = MEETS
        elif high is None:
            # One restart: no interval, the mean is all there is.
            status = MEETS if stat.mean <= limit else MISSES
        else:
            status = UNCERTAIN
        checks.append(SloCheck(key, float(limit), status, stat.mean, low, high))
    return checks


def meets_slo(checks: Sequence[SloCheck]) -> bool:
    """True when no limit keeps the configuration from winning."""
    return not any(c.fails for c in checks)


def constraint_values(checks: Sequence[SloCheck]) -> list[float]:
    """Optuna's constraint values, one per limit: ``mean / limit - 1`` (feasible at or below 0)."""
    return [_UNMEASURED_VIOLATION if c.mean is None else c.mean / c.limit_ms - 1.0 for c in checks]
