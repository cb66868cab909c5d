"""One search trial: restarts of its configuration until racing, the budget or a failure says stop.

:class:`TrialMeasurement` holds what the trial has so far (its restarts, its counted values, a screened cold
start's estimate) and how it ends (``state`` and ``reason``); :meth:`TrialMeasurement.finish` records it and tells
Optuna, once, whichever way the restarts stopped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import optuna
from optuna.trial import TrialState

from autotune.core.records import EngineConfig, RestartResult, speculation_plan_change
from autotune.core.transient import is_transient
from autotune.decisions.racing import Decision, decide_trial, incumbent_values, pooled_noise
from autotune.stats.coldstart import (
    DIFFER,
    ColdVerdict,
    cold_pairs,
    equivalence_margin,
    judge_cold,
    warm_estimate,
    warm_upper_bound,
    warmup_converged,
)
from autotune.stats.intervals import TrialSummary, summarize
from autotune.stats.latency import check_slo, summarize_latency
from autotune.store import frozen_trial
from autotune.store.ledger import Ledger, TrialRecord
from autotune.study._budget import Start, _search_may_start
from autotune.decisions.floor import (counted_for_summary, floor_constraint, floor_infeasible, hit_floor,
                                      infeasible_reason, sampler_state)
from autotune.study._floor import floor_restarts
from autotune.study._outputs import judge_outputs
from autotune.study._restart import measure_restart
from autotune.study.events import StudyContext, StudyObserver, notify

__all__ = ["TrialMeasurement"]


class TrialMeasurement:
    """Run restarts of ``config`` until racing says stop; record every restart on the trial as it lands.

    One counted restart enters the race; racing (:class:`RacingPolicy`) adds more only while the configuration
    could still be the best. The cold first start counts when the study's own pairs showed cold starts no different
    from warm ones and its warm-up converged (:mod:`autotune.stats.coldstart`); otherwise the same seed runs again
    warm, unless the cold start alone shows the configuration cannot be the best (:func:`_screened`).

    A retried trial (its worker died) carries the restarts it measured: they count, and it goes on from there.

    Attributes:
        restarts: Every restart of the trial so far, the carried ones first.
        values: The counted restarts' throughputs (what racing and the sampler see).
        estimate: The warm throughput predicted from a screened cold start (``None``: not screened).
        state: How the trial ends: ``COMPLETE`` unless a way out below says otherwise.
        reason: Why it stopped early (recorded as its failure or pruning reason), else ``None``.
    """

    def __init__(self, ctx: StudyContext, trial: optuna.Trial, config: EngineConfig,
                 observers: Sequence[StudyObserver]) -> None:
        self.ctx, self.trial, self.config, self.observers = ctx, trial, config, observers
        self.verdict = _cold_verdict(ctx)
        self.restarts: list[RestartResult] = list(ctx.ledger.restarts(frozen_trial(ctx.study, trial)))
        self.values: list[float] = [r.measured() for r in self.restarts if self.counts(r)]  # counts: ok
        self.estimate: float | None = None
        self.state = TrialState.COMPLETE
        self.reason: str | None = None
        #: The configuration's restarts once they make it infeasible (its memory-floor constraint).
        self.floor_restarts: list[RestartResult] | None = None

    def run(self) -> TrialRecord:
        self._race()
        return self.finish()

    def counts(self, result: RestartResult) -> bool:
        """Whether a restart counts: it ran, and it is warm or the study's cold starts count (and warm-up settled)."""
        return result.ok and (not result.cold or (self.verdict.counts and warmup_converged(result)))

    def _end(self, state: TrialState, reason: str) -> None:
        self.state, self.reason = state, reason

    def _may_start(self, extra: Sequence[Start]) -> bool:
        return _search_may_start(self.ctx.ledger, self.ctx.options, extra, self.ctx.space,
                                 bool(self.ctx.engine.caches_empty()))

    def _race(self) -> None:
        """The restarts; every way out that ends the trial other than complete says so through :meth:`_end`."""
        ctx, ledger, trial = self.ctx, self.ctx.ledger, self.trial
        options = ctx.options
        policy = options.policy
        # A transient failure (a floor hit, a lost restart) that was run again is no failure of the trial
        # (autotune.core.transient); two floor hits are (autotune.study._floor).
        carried_failure = next((r for r in counted_for_summary(self.restarts) if not r.ok and not is_transient(r)),
                               None)
        if self._floor_infeasible():
            return
        if carried_failure is not None:
            self._end(TrialState.FAIL, f"restart {carried_failure.restart} {carried_failure.status}: "
                                       f"{carried_failure.error}")
            return
        limit = policy.max_restarts if policy.racing else policy.min_restarts
        first = len(self.values)
        # A retry's starts were announced by the worker that died and held while the trial waited, but never checked
        # here: while a peer was failing that trial its hold was briefly gone, and another start may have taken it.
        resumed = bool(self.restarts)
        for j in range(first, limit):
            if resumed and j == first and not self._may_start([]):
                if not self.values:
                    self._end(TrialState.PRUNED, "no counted restart: the budget left no room to resume it")
                return
            if j >= policy.min_restarts:
                # Announce the next start before checking the budget, so two workers never both take the last one.
                ledger.record_planned_starts(trial, len(self.restarts) + 1)
                if not self._may_start([(self.config.key(), False)]):
                    ledger.record_planned_starts(trial, len(self.restarts))
                    return  # budget: keep what we have
            ran = measure_restart(ctx.engine, self.config, ctx.space.workload, restart=j,
                                  seed=options.search_seed(j), on_result=self._on_result, rerun_cold=self._rerun_cold,
                                  run_again=self._run_again, tokens=ctx.start_tokens)
            if not ran:
                # Another worker took the last start of the budget between this worker's check and its start.
                if not self.values:
                    self._end(TrialState.PRUNED, "no counted restart: the engine-start budget was spent")
                return
            last = ran[-1]
            if hit_floor(last) and self._floor_infeasible():
                return
            if not last.ok:
                self._end(TrialState.FAIL, f"restart {j} {last.status}: {last.error}")
                return
            if not self.counts(last):
                if self.estimate is not None:
                    # Complete on its predicted warm throughput (finish), the reason recorded as why it stopped.
                    self.reason = ("screened on its cold start: the bound on its warm throughput predicted from it "
                                   "is below the incumbent's mean")
                elif not self.values:
                    self._end(TrialState.PRUNED, "no counted restart: the budget left no room for a warm rerun")
                return
            self.values.append(last.measured())
            trial.report(last.measured(), step=j)
            if trial.should_prune():
                self._end(TrialState.PRUNED, "raced out: interval below the incumbent's")
                return
            if decide_trial(ctx.study, trial.number, self.values, policy) != Decision.MORE:
                return

    def _floor_infeasible(self) -> bool:
        """Whether this configuration's restarts (this trial's and every earlier run's) hit the memory floor twice;
        if so the trial ends failed, its constraint recorded in :meth:`finish`."""
        restarts = [*floor_restarts(self.ctx.ledger, self.config.key(), besides=self.trial.number), *self.restarts]
        if not floor_infeasible(restarts):
            return False
        self.floor_restarts = restarts
        self._end(TrialState.FAIL, infeasible_reason(restarts))
        return True

    def _run_again(self, failed: RestartResult) -> bool:
        """Whether to run a restart again that failed transiently (the memory guard killed it, or it was lost with
        the forkserver host): not when that made the configuration infeasible (its second floor hit), else as the
        budget allows (:func:`autotune.study._restart.measure_restart`)."""
        if hit_floor(failed) and self._floor_infeasible():
            return False
        self.ctx.ledger.record_planned_starts(self.trial, len(self.restarts) + 1)
        return self._may_start([])

    def _on_result(self, result: RestartResult) -> None:
        self.restarts.append(result)
        self.ctx.ledger.record_restarts(self.trial, self.restarts)
        label = f"trial {self.trial.number}"
        notify(self.observers, lambda o: o.on_restart(self.ctx, "search", label, result))

    def _rerun_cold(self, result: RestartResult) -> bool:
        """Whether to run a cold start's seed again warm (see :func:`autotune.study._restart.measure_restart`)."""
        if self.counts(result):
            return False
        if self.ctx.options.policy.racing and not self.values:
            self.estimate = _screened(self.ctx, self.trial.number, result, self.verdict)
            if self.estimate is not None:
                return False
        # The rerun was announced with the trial's first starts unless this cold start came later (another cache).
        self.ctx.ledger.record_planned_starts(self.trial, len(self.restarts) + 1)
        return self._may_start([])

    def finish(self) -> TrialRecord:
        """Record the trial's summary, latency and end, and tell Optuna its value or state."""
        ctx, ledger, trial, options = self.ctx, self.ctx.ledger, self.trial, self.ctx.options
        state, reason = self.state, self.reason
        ledger.record_planned_starts(trial, len(self.restarts))
        summary = _flag_speculation_change(ledger, self.config,
                                           summarize(self.config, counted_for_summary(self.restarts),
                                                     options.confidence,
                                                     options.interval_method, ctx.space.workload.unit,
                                                     counts=self.counts))
        ledger.record_summary(trial, summary)
        latency = summarize_latency(self.restarts, options.confidence)
        limits = ctx.space.slo_constraints
        ledger.record_latency(trial, latency, check_slo(latency, limits) if limits else None)
        if self.floor_restarts is not None:
            ledger.record_floor_constraint(trial, floor_constraint(self.floor_restarts))
        ledger.record_output_check(trial, judge_outputs(ledger, ctx.space, self.config, self.restarts))
        if reason and state == TrialState.FAIL:
            ledger.record_failure(trial, reason)
        elif reason:
            ledger.record_pruned(trial, reason)
        # A screened trial tells the sampler its predicted warm throughput (a GP ignores pruned trials, TPE ranks
        # them below every complete one); with no counted restart it is never the incumbent nor a verification
        # candidate.
        value = self.estimate if self.estimate is not None and not self.values else summary.mean
        if state == TrialState.COMPLETE:
            ctx.study.tell(trial, value)
        else:
            ctx.study.tell(trial, state=sampler_state(state, self.floor_restarts))
        return TrialRecord(trial.number, state.name, self.config, tuple(self.restarts), summary,
                           reason if state == TrialState.FAIL else None,
                           value=value if state == TrialState.COMPLETE else None)


def _cold_verdict(ctx: StudyContext) -> ColdVerdict:
    """The study's cold-start verdict from its own pairs (every trial's cold start and warm restarts), stored when it
    changes so the report and other workers read it."""
    ledger = ctx.ledger
    stored = ledger.cold_verdict()
    if stored.state == DIFFER:
        return stored  # final
    groups = [ledger.restarts(t) for t in ledger.study.get_trials(deepcopy=False) if not ledger.is_duplicate(t)]
    noise = pooled_noise(ledger.study, -1)
    alpha = 1.0 - ctx.options.confidence
    margin = None if noise is None else equivalence_margin(noise.sd, noise.df, 1.0 - alpha)
    verdict = judge_cold(cold_pairs(groups), None if margin is None or math.isnan(margin) else margin, alpha=alpha,
                         previous=stored.state)
    if verdict.state != stored.state or verdict.pairs != stored.pairs:
        ledger.record_cold_verdict(verdict)
    return verdict


def _screened(ctx: StudyContext, number: int, cold: RestartResult, verdict: ColdVerdict) -> float | None:
    """The predicted warm throughput when a cold start alone shows the configuration cannot be the best, else None.

    Only once cold starts are known to differ (else the cold start counts, or the study is still collecting the
    pairs that decide it). Cannot be the best: the one-sided prediction bound, at the racing confidence, for its
    warm throughput from the study's cold/warm pairs is below the incumbent's mean, so its warm restart would at
    best have completed it behind the incumbent.
    """
    if verdict.state != DIFFER or not cold.value:
        return None
    incumbent = incumbent_values(ctx.study, number)
    if not incumbent:
        return None
    ledger = ctx.ledger
    pairs = cold_pairs(ledger.restarts(t) for t in ledger.study.get_trials(deepcopy=False)
                       if t.number != number and not ledger.is_duplicate(t))
    bound = warm_upper_bound(float(cold.value), pairs, ctx.options.policy.confidence)
    if bound is None or bound >= float(np.mean(incumbent)):
        return None
    return warm_estimate(float(cold.value), pairs)


def _flag_speculation_change(ledger: Ledger, config: EngineConfig, summary: TrialSummary) -> TrialSummary:
    """Add the default capture mode speculation changed (see :func:`speculation_plan_change`) to the trial's
    differences, so the trial, the report and MLflow all flag it."""
    if config.cudagraph_mode is not None or not config.num_speculative_tokens:
        return summary  # only a default mode with speculation on can hide this change
    change = speculation_plan_change(config, summary.resolved_mode, ledger.mode_without_speculation(config))
    if change is None or any(d.startswith(f"{change.field}:") for d in summary.differences):
        return summary  # already flagged (a default that resolved to NONE)
    return dataclasses.replace(summary, differences=(*summary.differences, str(change)))

