"""Rechecking a stored verdict: the rules, as pure functions of the stored verification and today's restarts.

``autotune recheck`` measures a study's stored winner and baseline again, on today's engine and machine, in fresh
interleaved matched-seed restarts (the verification loop of :mod:`autotune.study._verification`, nothing else), and
stores what it found beside the study's verification, which it never touches. What is decided here:

* how many restarts each side gets at most (:func:`plan_recheck_restarts`: verification's planner);
* **did it change?** (:func:`change_test`, :func:`recheck_verdict`): today's speedup of the checked configuration
  over the baseline against the stored one, each with its own uncertainty, through an anytime-valid confidence
  sequence on the difference of the two log-ratios (:mod:`autotune.stats.anytime`), looked at after every round:
  ``unchanged`` (the sequence lies within +-margin), ``changed: now slower`` / ``changed: now faster`` (it lies
  wholly beyond the margin: a change the data support), or ``undecided`` (neither yet; how many more rounds would
  decide). A study whose baseline won gets the same test on its best challenger's ratio. A change in what the
  engine resolves (or a configuration that fails today) is named beside it;
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

from autotune.records import decode, encode
from autotune.decisions.planning import DEFAULT_MIN_EFFECT, estimate_noise, plan_restarts, pooled_log_variance
from autotune.core import facts as F
from autotune.core.records import EngineFacts, RestartResult
from autotune.decisions.verification import BASELINE, Verification
from autotune.stats.anytime import (ChangeSequence, change_sequence, ratio_sequence, rounds_for_change,
                                    rounds_to_decide)
from autotune.stats.intervals import Verdict

__all__ = [
    "CHANGED_FASTER",
    "CHANGED_SLOWER",
    "CONFIG_CHANGED",
    "DEFAULT_MARGIN",
    "FAILS_NOW",
    "SLOWER_THAN_BASELINE",
    "UNCHANGED",
    "UNDECIDED",
    "ChangeTest",
    "change_test",
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

#: The change test's verdicts (``autotune recheck`` since issue 44).
UNCHANGED = "unchanged"
UNDECIDED = "undecided"
CHANGED_SLOWER = "changed: now slower"
#: A change the data support that leaves the checked configuration slower than the baseline today.
SLOWER_THAN_BASELINE = "changed: now slower than the baseline"
CHANGED_FASTER = "changed: now faster"
#: The checked configuration (or the baseline) failed every restart today: nothing to compare, a change all the same.
FAILS_NOW = "changed: fails now"
#: Equivalence margin on the ratio of today's speedup to the stored one: within +-5% is "the same" (a smaller real
#: drift is no change worth a page; every smaller margin costs rounds).
DEFAULT_MARGIN = 0.05
#: Verdicts of rechecks stored before issue 44 (read back, no longer given).
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
#: Verdicts under which the stored advice holds (``autotune recheck`` exits 0): no change the data support.
HOLDS = (UNCHANGED, UNDECIDED, STILL_FASTER, STILL_NOT_FASTER, NEW_FASTER, NEW_SAME)
#: Kinds of recheck: the winner against the baseline on today's engine, or the winner on two engines.
BASELINE_KIND, ENGINES = "baseline", "engines"

#: Fewest counted restarts a side gets, whatever the stored verification had (an interval needs two; three give
#: the t interval a usable width).
MIN_RESTARTS = 3
#: Most counted restarts a side gets from the planner without ``--restarts`` (a recheck is a check, not a study).
MAX_RESTARTS = 12
#: The change a recheck is sized to see: its rounds are planned so that a 20% loss of the stored speedup lies
#: beyond the margin at 80% power where the stored verification's noise allows it (the rounds stop earlier once the
#: change test decides), up to :data:`MAX_CHANGE_ROUNDS`.
DETECT_CHANGE = 0.20
MAX_CHANGE_ROUNDS = 16
#: Per-restart facts compared then against now, with the relative change below which they count as the same.
COMPARED_FACTS = ((F.KV_GIB, 0.02), (F.KV_TOKENS, 0.02), (F.MAX_CONCURRENCY, 0.02), (F.GRAPH_MEMORY_GIB, 0.05),
                  (F.GPU_SM_CLOCK_MHZ, 0.03), (F.CPU_MHZ_MEAN, 0.05), (F.WEIGHTS_GIB, 0.02))


# -- planning: the same planner as verification ------------------------------------------------------------


def plan_recheck_restarts(stored: Verification, configs: int, *, restarts: int | None = None,
                          budget_minutes: float | None = None, margin: float = 0.05,
                          alpha: float = 0.05) -> tuple[int, int, str]:
    """Counted restarts ``(per challenger, baseline)`` for a recheck, and why.

    The same planner as verification (:func:`autotune.decisions.planning.plan_restarts`), fed the noise the stored
    verification measured on each side (pooled as its prior) and asked to resolve the stored speedup (at least
    the smallest effect worth detecting) at 80% power: a recheck asks whether that speedup still holds. Under
    ``--budget-minutes`` the plan fits what the stored verification's minutes per start buy, a cold start per
    configuration first; ``--restarts`` fixes both sides. The change test then needs its own rounds: as many as let
    a loss of :data:`DETECT_CHANGE` of the stored speedup show beyond the margin at 80% power (at most
    :data:`MAX_CHANGE_ROUNDS`; :func:`~autotune.stats.anytime.rounds_for_change`), both sides; these are the most
    a recheck runs, the change test stops it earlier once it decides.
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
    why = plan.describe().replace("verification:", "planned like verification:", 1)
    checked = stored.entries[checked_entry(stored)]
    then = [checked.summary.values, base.summary.values]
    if all(then):
        noise, _ = pooled_log_variance(then)
        change_rounds = rounds_for_change((len(then[0]), len(then[1])), math.sqrt(noise), math.log1p(-DETECT_CHANGE),
                                          math.log1p(margin), alpha, most=MAX_CHANGE_ROUNDS)
        if cap is not None and per_start > 0:  # no more rounds than the budget buys (the planned ones stay)
            change_rounds = min(change_rounds, max(n_c, n_b, int(cap / per_start) // max(1, configs)))
        if change_rounds > max(n_c, n_b):
            n_c = n_b = change_rounds
            why += (f"; up to {change_rounds} a side for the change test to see a {DETECT_CHANGE:.0%} loss of the "
                    "stored speedup")
    return n_c, n_b, why


# -- the verdict ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChangeTest:
    """Today's speedup against the stored one at the recheck's last look (ratios: today's speedup over the stored
    one; ``None`` where not bounded yet).

    Attributes:
        verdict: :data:`UNCHANGED`, :data:`CHANGED_SLOWER`, :data:`CHANGED_FASTER` or :data:`UNDECIDED`.
        ratio: Today's speedup over the stored one (geometric means), the estimate.
        low, high: Its anytime-valid confidence sequence at ``1 - alpha``.
        margin: The equivalence margin (0.05: within +-5% is unchanged).
        alpha: The error rate the sequence holds over every look.
        now_low, now_high: Today's speedup alone (its own sequence at the same level).
        restarts: Counted restarts ``[then challenger, then baseline, now challenger, now baseline]``.
        looks: Looks taken (one per round that gave both sides a restart).
        more_rounds: Undecided: the rounds more that would decide it at today's estimate and noise (``None``: no
            number of rounds a recheck takes would, the stored figure's own uncertainty is too wide).
        stopped: Why the rounds ended: ``decided``, ``planned`` (the planned rounds ran) or ``budget``.
    """

    verdict: str
    ratio: float | None
    low: float | None
    high: float | None
    margin: float
    alpha: float
    now_low: float | None = None
    now_high: float | None = None
    restarts: tuple[int, ...] = ()
    looks: int = 0
    more_rounds: int | None = None
    stopped: str = "planned"

    @property
    def decided(self) -> bool:
        return self.verdict != UNDECIDED

    @property
    def slower_than_baseline(self) -> bool:
        """Today's speedup alone lies below 1 (its sequence's upper end)."""
        return self.now_high is not None and self.now_high < 1.0

    def describe(self) -> str:
        """``x0.83 [0.74, 0.93] of the stored speedup`` and what it means, in one line."""
        if self.ratio is None:
            return f"{self.verdict} (no restart to compare)"
        span = f"x{self.ratio:.2f} [{_bound(self.low)}, {_bound(self.high)}]"
        within = f"+-{self.margin:.0%}"
        if self.verdict == UNCHANGED:
            return f"unchanged (within {within}): today's speedup is {span} of the stored one"
        if self.verdict in (CHANGED_SLOWER, CHANGED_FASTER):
            by = abs(self.ratio - 1.0)
            way = "slower" if self.ratio < 1.0 else "faster"
            return f"changed: now {way} by {by:.0%} ({span} of the stored speedup, beyond {within})"
        more = ("no number of rounds a recheck takes decides it: the stored verification's own uncertainty is wider "
                f"than {within}" if self.more_rounds is None else f"{self.more_rounds} more round(s) would decide "
                "it at today's estimate (autotune recheck --restarts N)")
        return f"undecided: {span} of the stored speedup; {more}"


def _bound(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(log_value: float) -> float | None:
    try:
        return math.exp(log_value) if math.isfinite(log_value) else None
    except OverflowError:
        return None


def change_test(then: tuple[Sequence[float], Sequence[float]], now: tuple[Sequence[float], Sequence[float]],
                margin: float = DEFAULT_MARGIN, alpha: float = 0.05, *, looks: int = 0, stopped: str = "planned",
                max_rounds: int = 200) -> ChangeTest:
    """Did the checked configuration's speedup over the baseline change? ``then``/``now``: its and the baseline's
    counted throughputs, stored and today's.

    ``changed`` when the anytime-valid sequence of the change (:func:`~autotune.stats.anytime.change_sequence`)
    lies wholly beyond ``+-margin`` (on the log scale, ``log(1 + margin)``): at most ``alpha`` of rechecks of an
    engine whose speedup moved less than the margin say so, whenever they stop. ``unchanged`` when it lies wholly
    within; ``undecided`` otherwise.
    """
    counts = tuple(len([v for v in grp if v > 0]) for grp in (*then, *now))
    seq = change_sequence(then[0], then[1], now[0], now[1], alpha)
    if seq is None:
        return ChangeTest(UNDECIDED, None, None, None, margin, alpha, restarts=counts, looks=looks, stopped=stopped)
    today: ChangeSequence | None = ratio_sequence(now[0], now[1], alpha)
    edge = math.log1p(margin)
    if seq.low > edge or seq.high < -edge:
        verdict = CHANGED_FASTER if seq.low > edge else CHANGED_SLOWER
    elif -edge <= seq.low and seq.high <= edge:
        verdict = UNCHANGED
    else:
        verdict = UNDECIDED
    more = None
    if verdict == UNDECIDED:
        more = rounds_to_decide((counts[0], counts[1]), (counts[2], counts[3]), seq.estimate, seq.sigma, edge, alpha,
                                most=max_rounds)
    return ChangeTest(verdict, _ratio(seq.estimate), _ratio(seq.low), _ratio(seq.high), margin, alpha,
                      None if today is None else _ratio(today.low), None if today is None else _ratio(today.high),
                      counts, looks, more, stopped)


def recheck_verdict(change: ChangeTest, config_changed: bool, fails_now: bool = False) -> str:
    """The recheck's verdict: a change the data support first (today's configuration slower than the baseline named
    as such), then a configuration that fails today, then a resolved configuration that changed (the speed held,
    but the engine runs something else: it holds by luck), else the change test's ``unchanged`` or ``undecided``."""
    if change.verdict == CHANGED_SLOWER:
        return SLOWER_THAN_BASELINE if change.slower_than_baseline else CHANGED_SLOWER
    if change.verdict == CHANGED_FASTER:
        return CHANGED_FASTER
    if fails_now:
        return FAILS_NOW
    return CONFIG_CHANGED if config_changed else change.verdict


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
    a, b = encode(EngineFacts.of(then)), encode(EngineFacts.of(now))
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
        seed_base: First seed of the recheck's rounds (fresh: no earlier restart of the study ran on it, nor any
            other recheck's, concurrent ones included).
        change: The change test at the last look (:class:`ChangeTest` as a dict; empty in records from before it).
        budget_minutes: ``--budget-minutes`` it ran under, and ``minutes_used``: the engine minutes it took.
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
    change: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    budget_minutes: float | None = None
    minutes_used: float = 0.0

    @property
    def holds(self) -> bool:
        return self.verdict in HOLDS

    @property
    def change_test(self) -> ChangeTest | None:
        """The change test, ``None`` for a record from before it (or of two engines)."""
        return decode(ChangeTest, self.change) if self.change else None
