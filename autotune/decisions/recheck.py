"""Rechecking a stored verdict: the rules, as pure functions of the stored verification and today's restarts.

``autotune recheck`` measures a study's stored winner and baseline again, on today's engine and machine, in fresh
interleaved matched-seed restarts (the verification loop of :mod:`autotune.study._verification`, nothing else), and
stores what it found beside the study's verification, which it never touches. What is decided here:

* how many restarts each side gets (:func:`plan_recheck_restarts`: verification's planner);
* the verdict then against now (:func:`recheck_verdict`): ``still faster``, ``no longer faster``, ``now slower``,
  ``engine changed the configuration`` (a stored verdict that was not "faster" gives ``still not faster`` or
  ``now faster``);
* what differs between then and now (:func:`fact_differences`, :func:`resolved_changes`): engine version, image id,
  driver, GPU (the stored :class:`~autotune.core.records.EngineFacts`), and per restart the resolved capture mode
  and sizes, KV facts and clocks.

:class:`RecheckRecord` is what the study stores (``Ledger.record_recheck``), one per recheck, oldest first.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.decisions.planning import DEFAULT_MIN_EFFECT, estimate_noise, plan_restarts, pooled_log_variance
from autotune.core import facts as F
from autotune.core.records import EngineFacts, RestartResult
from autotune.decisions.verification import BASELINE, Verification
from autotune.stats.intervals import Verdict

__all__ = [
    "CONFIG_CHANGED",
    "ENGINES",
    "HOLDS",
    "NO_LONGER_FASTER",
    "NOW_FASTER",
    "NEW_FASTER",
    "NEW_SAME",
    "NOW_SLOWER",
    "STILL_FASTER",
    "STILL_NOT_FASTER",
    "RecheckRecord",
    "checked_entry",
    "engines_verdict",
    "fact_differences",
    "plan_recheck_restarts",
    "recheck_verdict",
    "resolved_changes",
]

STILL_FASTER = "still faster"
NO_LONGER_FASTER = "no longer faster"
NOW_SLOWER = "now slower"
CONFIG_CHANGED = "engine changed the configuration"
#: The stored verdict was not "faster" (the baseline won): the recheck says whether that still holds.
STILL_NOT_FASTER = "still not faster"
NOW_FASTER = "now faster"
#: Two engines compared (``recheck --engine-opt``): the stored winner on the new engine against the study's engine.
NEW_FASTER = "faster on the new engine"
NEW_SAME = "no significant difference on the new engine"
#: Verdicts under which the stored advice holds (``autotune recheck`` exits 0).
HOLDS = (STILL_FASTER, STILL_NOT_FASTER, NEW_FASTER, NEW_SAME)
#: Kinds of recheck: the winner against the baseline on today's engine, or the winner on two engines.
BASELINE_KIND, ENGINES = "baseline", "engines"

#: Fewest counted restarts a side gets, whatever the stored verification had (an interval needs two; three give
#: the t interval a usable width).
MIN_RESTARTS = 3
#: Most counted restarts a side gets from the planner without ``--restarts`` (a recheck is a check, not a study).
MAX_RESTARTS = 12
#: Per-restart facts compared then against now, with the relative change below which they count as the same.
COMPARED_FACTS = ((F.KV_GIB, 0.02), (F.KV_TOKENS, 0.02), (F.MAX_CONCURRENCY, 0.02), (F.GRAPH_MEMORY_GIB, 0.05),
                  (F.GPU_SM_CLOCK_MHZ, 0.03), (F.CPU_MHZ_MEAN, 0.05), (F.WEIGHTS_GIB, 0.02))


# -- planning: the same planner as verification ------------------------------------------------------------


def plan_recheck_restarts(stored: Verification, configs: int, *, restarts: int | None = None,
                          budget_minutes: float | None = None) -> tuple[int, int, str]:
    """Counted restarts ``(per challenger, baseline)`` for a recheck, and why.

    The same planner as verification (:func:`autotune.decisions.planning.plan_restarts`), fed the noise the stored
    verification measured on each side (pooled as its prior) and asked to resolve the stored speedup (at least
    the smallest effect worth detecting) at 80% power: a recheck asks whether that speedup still holds. Under
    ``--budget-minutes`` the plan fits what the stored verification's minutes per start buy, a cold start per
    configuration first; ``--restarts`` fixes both sides.
    """
    if restarts is not None:
        return max(1, int(restarts)), max(1, int(restarts)), f"--restarts {int(restarts)}"
    winner, base = stored.winner, stored.baseline
    w, b = list(winner.summary.values), list(base.summary.values)
    prior, _ = pooled_log_variance([e.summary.values for e in stored.entries if e.summary.values])
    speedup = winner.comparison.speedup if winner.comparison is not None else None
    effect = max(DEFAULT_MIN_EFFECT, speedup if speedup is not None and math.isfinite(speedup) else 0.0)
    per_start = stored.minutes_used / stored.restarts_used if stored.restarts_used else 0.0
    cap = None
    if budget_minutes is not None and per_start > 0:
        cap = max(0.0, budget_minutes - configs * per_start)  # one cold start per configuration first
    plan = plan_restarts(estimate_noise(w, prior), estimate_noise(b, prior), challengers=max(1, configs - 1),
                         min_effect=effect, max_minutes=cap, challenger_minutes=per_start or 1.0,
                         baseline_minutes=per_start or 1.0)
    n_c, n_b = min(plan.challenger, MAX_RESTARTS), min(plan.baseline, MAX_RESTARTS)
    return n_c, n_b, plan.describe().replace("verification:", "planned like verification:", 1)


# -- the verdict ------------------------------------------------------------------------------------------


def recheck_verdict(stored_verdict: str, now_verdict: str | None, config_changed: bool) -> str:
    """Then against now. A slower interval is ``now slower`` whatever else; a stored "faster" that is no longer
    significant is ``no longer faster``; a verdict that held on a configuration the engine now resolves
    differently is ``engine changed the configuration`` (the winner runs as something else: it holds by luck)."""
    if now_verdict == Verdict.SLOWER:
        return NOW_SLOWER
    if stored_verdict == Verdict.FASTER:
        if now_verdict != Verdict.FASTER:
            return NO_LONGER_FASTER
        return CONFIG_CHANGED if config_changed else STILL_FASTER
    if now_verdict == Verdict.FASTER:
        return NOW_FASTER
    return CONFIG_CHANGED if config_changed else STILL_NOT_FASTER


def engines_verdict(now_verdict: str | None, config_changed: bool) -> str:
    """The winner on a new engine against the study's engine, as :func:`recheck_verdict` orders it: slower first,
    then a changed resolved configuration (the new engine runs something else), then the comparison's verdict."""
    if now_verdict == Verdict.SLOWER:
        return NOW_SLOWER
    if config_changed:
        return CONFIG_CHANGED
    return NEW_FASTER if now_verdict == Verdict.FASTER else NEW_SAME


def checked_entry(stored: Verification) -> int:
    """The entry a recheck compares with the baseline: the stored winner, or when the baseline won, the challenger
    with the highest verified mean (what the study would have picked had it been faster)."""
    if stored.winner.candidate.role != BASELINE:
        return stored.winner_index
    usable = [i for i, e in enumerate(stored.entries) if e.candidate.role != BASELINE and not e.dropped
              and e.summary.values]
    if not usable:
        return stored.winner_index
    return max(usable, key=lambda i: stored.entries[i].summary.mean)


# -- what differs -----------------------------------------------------------------------------------------


def fact_differences(then: EngineFacts | Mapping[str, Any] | None, now: EngineFacts | Mapping[str, Any] | None,
                     then_restarts: Sequence[RestartResult] = (), now_restarts: Sequence[RestartResult] = ()
                     ) -> list[str]:
    """``name: then -> now`` for every engine fact (version, image id, driver, GPU, CUDA, profile, ...) that
    differs, then for every per-restart fact of :data:`COMPARED_FACTS` whose median moved beyond its tolerance."""
    a, b = EngineFacts.of(then).to_dict(), EngineFacts.of(now).to_dict()
    out = [f"{k}: {a.get(k, '-')} -> {b.get(k, '-')}" for k in sorted(set(a) | set(b))
           if str(a.get(k)) != str(b.get(k))]
    for key, tolerance in COMPARED_FACTS:
        x, y = _median_fact(then_restarts, key), _median_fact(now_restarts, key)
        if x is None and y is None:
            continue
        if x is None or y is None or abs(y - x) > tolerance * max(abs(x), 1e-9):
            out.append(f"{key}: {_fmt(x)} -> {_fmt(y)} (median over restarts)")
    return out


def resolved_changes(label: str, then: Sequence[RestartResult], now: Sequence[RestartResult]) -> list[str]:
    """``label: field then -> now`` for each resolved fact (capture mode, capture sizes, model runner, async
    scheduling, speculation) the engine reports differently now than in the stored restarts."""
    a, b = _resolved(then), _resolved(now)
    if a is None or b is None:
        return []
    return [f"{label}: {k} {a.get(k)} -> {b.get(k)}" for k in a if k in b and a[k] != b[k]]


def _resolved(restarts: Sequence[RestartResult]) -> dict[str, Any] | None:
    ok = [r for r in restarts if r.ok and r.resolved is not None]
    if not ok:
        return None
    res = ok[-1].resolved
    assert res is not None
    out: dict[str, Any] = {
        "cudagraph_mode": None if res.cudagraph_mode is None else str(res.cudagraph_mode).rsplit(".", 1)[-1],
        "cudagraph_capture_sizes": None if res.cudagraph_capture_sizes is None else sorted(res.cudagraph_capture_sizes),
    }
    for key in ("model_runner", "async_scheduling", "speculative_method", "num_speculative_tokens"):
        if key in res.details:
            out[key] = res.details[key]
    return out


def _median_fact(restarts: Sequence[RestartResult], key: str) -> float | None:
    values = [float(v) for r in restarts if r.ok and isinstance(v := r.facts.get(key), (int, float))
              and not isinstance(v, bool)]
    return statistics.median(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


# -- the stored record -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecheckRecord:
    """One recheck, as the study stores it (the study's own verification is never changed).

    Attributes:
        when: UTC time the recheck concluded (ISO 8601).
        kind: ``baseline`` (the winner against the baseline today) or ``engines`` (the winner on a new engine
            beside the study's engine, in the same rounds).
        verdict: One of this module's verdicts (``engines``: the new engine's verdict against the old one).
        stored_verdict: The study's verification verdict.
        checked: Label of the configuration checked (the stored winner).
        then: The stored figures: ``{"speedup", "ci_low", "ci_high", "confidence", "means": {label: mean}}``.
        now: Today's, in the same shape.
        verification: Today's rounds, concluded as verification concludes them.
        engine_then, engine_now: Engine facts of the study and of today's engine (the new one, for ``engines``).
        differences: What differs then against now (:func:`fact_differences`).
        resolved_changes: Resolved configurations that changed (:func:`resolved_changes`): the loud warning.
        restarts_per_config: Counted restarts each configuration got, and ``planned_why``: how they were sized.
        seed_base: First seed of the recheck's rounds (fresh: no earlier restart of the study ran on it).
    """

    when: str
    kind: str
    verdict: str
    stored_verdict: str
    checked: str
    then: Mapping[str, Any]
    now: Mapping[str, Any]
    verification: Verification
    engine_then: Mapping[str, Any]
    engine_now: Mapping[str, Any]
    differences: tuple[str, ...] = ()
    resolved_changes: tuple[str, ...] = ()
    restarts_per_config: int = 0
    planned_why: str = ""
    seed_base: int = 0

    @property
    def holds(self) -> bool:
        return self.verdict in HOLDS

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(verification=self.verification.to_dict(), then=dict(self.then), now=dict(self.now),
                   engine_then=dict(self.engine_then), engine_now=dict(self.engine_now),
                   differences=list(self.differences), resolved_changes=list(self.resolved_changes))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecheckRecord:
        kw = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        kw["verification"] = Verification.from_dict(data["verification"])
        kw["differences"] = tuple(data.get("differences") or ())
        kw["resolved_changes"] = tuple(data.get("resolved_changes") or ())
        return cls(**kw)
