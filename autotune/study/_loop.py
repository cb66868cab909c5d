"""The study: an Optuna ask/tell loop over fresh-restart trials, then verification of the best against the baseline.

Everything a study learns is in Optuna's storage (SQLite under ``mlruns/`` by default), written as it
happens, so the same command after Ctrl-C or ``kill -9`` resumes: finished trials are kept, a trial whose
process is gone is failed and retried with the restarts it had measured, and verification restarts already run
are not run again.

Several workers (processes, on one machine or many) may run the same study at once, sharing only the storage:
each asks Optuna for its own trials (TPE with ``constant_liar`` keeps them apart), records a heartbeat for the
trial it runs, and fails and retries only trials whose heartbeat went stale. They share the engine-start budget
through the starts each running trial announces. When the search is over, each verification round and the
conclusion are claims (:mod:`autotune.store.claims`): taken by exactly one worker, taken over if it dies.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.store import ledger as _ledger
from autotune.store.claims import Claims
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
from autotune.engines import EngineBackend
from autotune.engines.process import stop_live, stop_orphans
from autotune.study.events import StudyContext, StudyObserver, notify
from autotune.store.fingerprint import check_resume, fingerprint
from autotune.store.heartbeat import Heartbeat
from autotune.store.ledger import DEFAULT_STORAGE, VERIFY_CONCLUDE_JOB, Ledger, StudyMeta, TrialRecord
from autotune.stats.intervals import TrialSummary, measure_restart, summarize
from autotune.stats.latency import check_slo, summarize_latency
from autotune.study.options import StudyOptions
from autotune.decisions.racing import Decision, RacingPruner, decide_trial, incumbent_values, pooled_noise
from autotune.core.records import EngineConfig, EngineFacts, RestartResult, speculation_plan_change
from autotune.config.space import Infeasible, SearchSpace
from autotune.store.studydir import check_owned, prepare_study_dir
from autotune.decisions.verification import (
    BASELINE,
    Candidate,
    SearchEvidence,
    Verification,
    conclude,
    round_participants,
    run_round,
    split_rounds,
)
from autotune.decisions.verification import select_candidates as select_verified

__all__ = [
    "BudgetTooSmall",
    "DEFAULT_STORAGE",
    "Interrupted",
    "StudyContext",
    "StudyOptions",
    "TrialRecord",
    "check_budget",
    "make_sampler",
    "minimum_plan",
    "run_study",
    "select_candidates",
    "smallest_restart_budget",
]

#: Give up after this many suggestions in a row that start no engine (duplicates, infeasible): space exhausted.
MAX_IDLE_SUGGESTIONS = 30
#: Random draws tried for an unmeasured configuration after a repeated suggestion (:func:`_queue_unmeasured`).
EXPLORE_DRAWS = 50
#: Seconds between looks at the study while a worker waits for others (their trials, verification rounds).
DEFAULT_POLL_S = 2.0

optuna.logging.set_verbosity(optuna.logging.WARNING)


class Interrupted(Exception):
    """Ctrl-C or SIGTERM; everything finished so far is saved and the same command resumes.

    Attributes:
        signum: The signal that interrupted the study (``SIGINT`` for Ctrl-C).
    """

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)


# -- opening ---------------------------------------------------------------------------------------------


def make_sampler(name: str, seed: int) -> tuple[optuna.samplers.BaseSampler, str]:
    """The sampler and a sentence saying why, recorded in the study's metadata.

    Under latency limits each trial carries Optuna's constraints (``Trial.set_constraint``, one per limit), which
    TPE and GP read to model feasibility; Optuna 5 deprecates ``constraints_func`` in its favour.
    """
    if name == "tpe":
        with warnings.catch_warnings():  # group= is "experimental" but is what makes TPE handle the conditional space
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # constant_liar: trials other workers are running count as bad guesses, so parallel suggestions
            # spread out instead of piling onto the current best region (a no-op for one worker).
            # n_startup_trials=10 is Optuna's default; 6 (two baselines and four random draws) let TPE settle on a
            # plateau early (docs/benchmarks.md: gb10 mean regret at 60 starts 2.4% with 6, 0.6% with 10).
            sampler = optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed, n_startup_trials=10,
                                                 constant_liar=True)
        why = ("TPE (multivariate, group, constant liar): handles the conditional space (draft only when K > 0) "
               "natively; it is told the mean over matched restarts of each trial")
        return sampler, why
    if name == "gp":
        # The objective is a noisy mean over restarts: the GP must model observation noise.
        sampler = optuna.samplers.GPSampler(seed=seed, deterministic_objective=False, n_startup_trials=6)
        why = ("GP (deterministic_objective=False): a noisy objective; it fits a noise term rather than "
               "interpolating lucky restarts")
        return sampler, why
    if name == "random":
        # The benchmark's control: the same racing and verification with no model of the space at all.
        why = "random: uniform over the space, no model; a control for what the model-based samplers add"
        return optuna.samplers.RandomSampler(seed=seed), why
    raise ValueError(f"unknown sampler {name!r}: use 'tpe', 'gp' or 'random'")


def sampler_seed(seed: int, worker: int | None) -> int:
    """The sampler's seed: the study's for a lone process, one per worker otherwise (host and index), so the
    workers' random first suggestions differ instead of repeating each other."""
    if worker is None:
        return seed
    import socket

    return zlib.crc32(f"{seed}/{socket.gethostname()}/{worker}".encode())


def open_study(options: StudyOptions, worker: int | None = None) -> tuple[Ledger, bool]:
    """Create or load the study. Returns ``(ledger, resumed)``."""
    sampler, _ = make_sampler(options.sampler, sampler_seed(options.seed, worker))
    pruner = RacingPruner(options.policy) if options.policy.racing else optuna.pruners.NopPruner()
    return _ledger.create_or_load(options.study_name, options.storage, sampler=sampler, pruner=pruner,
                                  fresh=options.fresh, heartbeat_s=options.heartbeat_s)


# -- budget ----------------------------------------------------------------------------------------------
# A cold first start (compiling) can cost several times a warm one (H200 MoE: 167 s against 27-34 s), so a
# forecast from the mean of the starts seen so far, dominated early on by cold ones, holds back far more for
# verification than it will cost, and a 26-minute budget bought no search. Each planned start is priced by its
# kind instead: a cold start at the study's mean cold start, a warm restart at that configuration's own warm mean
# where it has one, else at the study's warm mean.

#: A planned engine start: the configuration's key (``None``: not known yet) and whether it starts cold.
Start = tuple[str | None, bool]


class BudgetTooSmall(ValueError):
    """The budget cannot pay for the baselines, one search trial and verification; the message names the flag and
    the smallest budget that would."""


@dataclasses.dataclass(frozen=True)
class StartCosts:
    """Engine wall minutes of the study's successful starts so far, by kind."""

    warm_by_key: dict[str, list[float]]
    warm: list[float]
    cold: list[float]

    @classmethod
    def of(cls, ledger: Ledger) -> StartCosts:
        by_key: dict[str, list[float]] = {}
        warm: list[float] = []
        cold: list[float] = []
        retried = ledger.retried()
        runs = [(ledger.config_key(t), r) for t in ledger.study.get_trials(deepcopy=False) if t.number not in retried
                for r in ledger.restarts(t)]
        for by_key in (ledger.verify_progress(), *ledger.verify_rounds().values()):
            runs += [(key, RestartResult.from_dict(d)) for key, ds in by_key.items() for d in ds]
        for key, r in runs:
            if r.wall_s is None or not r.ok:
                continue
            minutes = float(r.wall_s) / 60.0
            if r.cold:
                cold.append(minutes)
            else:
                warm.append(minutes)
                if key is not None:
                    by_key.setdefault(key, []).append(minutes)
        return cls(by_key, warm, cold)

    @property
    def known(self) -> bool:
        return bool(self.warm or self.cold)

    def price(self, start: Start) -> float:
        """Minutes one planned start should cost; 0 while nothing was measured (the first start is the measurement).

        A cold start on an engine that never reported one costs what its warm starts cost; a warm start before any
        warm start was measured is priced at the cold mean (an upper bound for one or two starts, no more).
        """
        key, cold = start
        warm_mean = sum(self.warm) / len(self.warm) if self.warm else None
        cold_mean = sum(self.cold) / len(self.cold) if self.cold else None
        if cold:
            return cold_mean if cold_mean is not None else (warm_mean or 0.0)
        own = self.warm_by_key.get(key) if key is not None else None
        if own:
            return sum(own) / len(own)
        return warm_mean if warm_mean is not None else (cold_mean or 0.0)

    def forecast(self, starts: Sequence[Start]) -> float:
        return sum(self.price(s) for s in starts)


def _top_k_follows_minutes(options: StudyOptions) -> bool:
    """Verification's top-k is left to a minutes budget alone (no ``top_k``, no restart budget)."""
    return options.top_k_follows_minutes


def _verify_top_k(ledger: Ledger, options: StudyOptions) -> int:
    """Configurations verification takes: :attr:`StudyOptions.verify_top_k`, except under a minutes budget alone,
    where it scales with the starts the budget buys at the study's measured warm-start price (one until a warm
    start is priced: the least that lets a study under a minutes budget claim anything)."""
    if not _top_k_follows_minutes(options):
        return options.verify_top_k
    costs = StartCosts.of(ledger)
    warm = costs.price((None, False)) if costs.warm else 0.0
    return options.top_k_for(options.budget_minutes / warm if warm > 0 else 0)


def _verify_plan(ledger: Ledger, space: SearchSpace, options: StudyOptions) -> list[Start]:
    """Verification's share: the baseline and ``top_k`` configurations, ``verify_restarts`` warm restarts each, and
    with several compile caches one cold start per verified configuration and other cache. The runner-up
    (:func:`_candidates`) gets no share: it runs on a start the search left over."""
    if not options.verify:
        return []
    keys: list[str | None] = [space.baseline().key(), *([None] * _verify_top_k(ledger, options))]
    plan: list[Start] = [(key, False) for key in keys for _ in range(options.verify_restarts)]
    others = min(options.verify_restarts, max(0, ledger.compile_caches() - 1))
    return plan + [(key, True) for key in keys for _ in range(others)]


def _runner_up_starts(ledger: Ledger) -> list[Start]:
    """The runner-up's share of verification: its first-round restart, and with several compile caches a cold
    start before it (the round may run in a cache its configuration never ran in)."""
    return [(None, True)] * (ledger.compile_caches() > 1) + [(None, False)]


def _entry_starts(options: StudyOptions, verdict: ColdVerdict) -> list[Start]:
    """A new configuration's first starts: its cold start, its first counted restarts (the cold one among them when
    the study's cold starts count)."""
    return [(None, True)] + [(None, False)] * (options.policy.min_restarts - (1 if verdict.counts else 0))


def _first_starts(options: StudyOptions, landed: int, verdict: ColdVerdict) -> int:
    """Engine starts a trial announces when it starts: its first counted restarts, plus one when nothing ran yet for
    the cold first start of a new configuration unless cold starts count."""
    return options.policy.min_restarts + (1 if landed == 0 and not verdict.counts else 0)


def minimum_plan(space: SearchSpace, options: StudyOptions) -> list[Start]:
    """The least a study can do and still say something: the baselines, one search trial, verification.

    Priced on the conservative side: no cold start counts (the study has not shown it may), and the first
    baseline gets a second counted restart (racing needs the study's noise, :class:`RacingPolicy`). Verification
    takes the restart budget's top-k, or one configuration under a minutes budget alone (what a budget that
    barely pays for the minimum buys, :func:`_verify_top_k`).
    """
    policy = options.policy
    plan: list[Start] = []
    for i, params in enumerate(space.baseline_params()):
        key = space.config_from_params(params).key()
        counted = policy.min_restarts
        if i == 0 and policy.racing and policy.pooled and policy.max_restarts >= 2:
            counted = max(counted, 2)
        plan += [(key, True)] + [(key, False)] * counted
    plan += [(None, True)] + [(None, False)] * policy.min_restarts
    if options.verify:
        top_k = 1 if _top_k_follows_minutes(options) else options.verify_top_k
        keys: list[str | None] = [space.baseline().key(), *([None] * top_k)]
        plan += [(key, False) for key in keys for _ in range(options.verify_restarts)]
    return plan


def smallest_restart_budget(space: SearchSpace, options: StudyOptions) -> int:
    """The smallest ``--budget-restarts`` that pays for :func:`minimum_plan` (verification's top-k scales with it)."""
    budget = 1
    while True:
        need = len(minimum_plan(space, dataclasses.replace(options, budget_restarts=budget)))
        if need <= budget:
            return budget
        budget = need


def check_budget(ledger: Ledger, space: SearchSpace, options: StudyOptions) -> None:
    """Refuse a budget too small for :func:`minimum_plan`, naming the smallest one that would do.

    A restart budget is checked before anything runs. A minutes budget needs to know what a start costs: it is
    checked before anything runs when the study has a warm start on record (a resume), else as soon as one has
    been measured (the first baseline's second start); once a search trial has finished it is past the minimum
    and never refused.

    Raises:
        BudgetTooSmall: one line with the flag, what it must pay for, and the least budget that would.
    """
    if ledger.finished_search_trials() > len(space.baseline_params()):
        return
    what = "the baselines, one search trial and verification"
    plan = minimum_plan(space, options)
    if options.budget_restarts is not None and options.budget_restarts < len(plan):
        least = smallest_restart_budget(space, options)
        raise BudgetTooSmall(f"--budget-restarts {options.budget_restarts} is too small for {what} ({len(plan)} "
                             f"engine starts): use --budget-restarts {least} or more")
    if options.budget_minutes is None:
        return
    costs = StartCosts.of(ledger)
    if not costs.warm:
        return  # a warm start priced at the cold one would refuse budgets that suffice (the 26 minutes)
    need = costs.forecast(plan)
    if need > options.budget_minutes:
        cold = costs.price((None, True)) * 60.0
        warm = costs.price((None, False)) * 60.0
        raise BudgetTooSmall(f"--budget-minutes {options.budget_minutes:g} is too small for {what} ({len(plan)} "
                             f"engine starts at the measured {cold:.0f} s per cold start and {warm:.0f} s per warm "
                             f"one): use --budget-minutes {math.ceil(need)} or more")


def _search_may_start(ledger: Ledger, options: StudyOptions, extra: Sequence[Start],
                      space: SearchSpace | None = None) -> bool:
    """Whether the ``extra`` search starts fit the budget, with verification's share and every running trial's
    announced starts (this worker's included) held back."""
    used, minutes = ledger.budget_used()
    in_flight = ledger.starts_in_flight(unplanned=options.policy.min_restarts)
    if options.budget_restarts is not None:
        held = in_flight + options.verify_reserve
        if options.verify:
            # A verification round in a compile cache that never ran a configuration starts it cold first: with
            # several caches (machines, workdirs) hold one such start per verified configuration and other cache.
            held += (options.verify_top_k + 1) * min(options.verify_restarts, max(0, ledger.compile_caches() - 1))
        if used + held + len(extra) > options.budget_restarts:
            return False
    if options.budget_minutes is not None:
        costs = StartCosts.of(ledger)
        top_k = _verify_top_k(ledger, options)
        reserve = (_verify_plan(ledger, space, options) if space is not None
                   else [(None, False)] * ((top_k + 1) * options.verify_restarts if options.verify else 0))
        # Running trials' announced starts are mostly warm restarts; their cold starts have landed already. Until
        # a warm start has been measured the reserve cannot be priced (at the cold price it would hold back several
        # times what it costs): the first warm start is the measurement, and only what is asked for is priced.
        need = costs.forecast([*extra, *reserve, *[(None, False)] * in_flight] if costs.warm else [*extra])
        if minutes + need > options.budget_minutes:
            return False
    return True


# -- the search ------------------------------------------------------------------------------------------


def _tell_duplicate(ledger: Ledger, trial: optuna.Trial, original: FrozenTrial) -> None:
    ledger.record_duplicate(trial, original)
    if original.state == TrialState.COMPLETE:
        ledger.study.tell(trial, original.value)
    elif original.state == TrialState.RUNNING:
        # Another worker is measuring this configuration right now: nothing to tell yet, nothing to run twice.
        ledger.study.tell(trial, state=TrialState.PRUNED)
    else:
        ledger.study.tell(trial, state=original.state)


def _measure_trial(ctx: StudyContext, trial: optuna.Trial, config: EngineConfig,
                   observers: Sequence[StudyObserver]) -> TrialRecord:
    """Run restarts of ``config`` until racing says stop; record every restart on the trial as it lands.

    One counted restart enters the race; racing (:class:`RacingPolicy`) adds more only while the configuration
    could still be the best. The cold first start counts when the study's own pairs showed cold starts no different
    from warm ones and its warm-up converged (:mod:`autotune.stats.coldstart`); otherwise the same seed runs again warm,
    unless the cold start alone shows the configuration cannot be the best (:func:`_screened`).

    A retried trial (its worker died) carries the restarts it measured: they count, and it goes on from there.
    """
    options, ledger, study = ctx.options, ctx.ledger, ctx.study
    policy = options.policy
    verdict = _cold_verdict(ctx)
    restarts: list[RestartResult] = list(ledger.restarts(study._storage.get_trial(trial._trial_id)))

    def counts(result: RestartResult) -> bool:
        return result.ok and (not result.cold or (verdict.counts and warmup_converged(result)))

    counted = [r for r in restarts if counts(r)]
    values: list[float] = [float(r.value) for r in counted]  # type: ignore[arg-type]
    estimate: float | None = None  # the warm throughput predicted from a screened cold start

    def on_result(result: RestartResult) -> None:
        restarts.append(result)
        ledger.record_restarts(trial, restarts)
        notify(observers, "on_restart", ctx, "search", f"trial {trial.number}", result)

    def rerun_cold(result: RestartResult) -> bool:
        nonlocal estimate
        if counts(result):
            return False
        if policy.racing and not values:
            estimate = _screened(ctx, trial.number, result, verdict)
            if estimate is not None:
                return False
        # The rerun was announced with the trial's first starts unless this cold start came later (another cache).
        ledger.record_planned_starts(trial, len(restarts) + 1)
        return _search_may_start(ledger, options, [], ctx.space)

    state, reason = TrialState.COMPLETE, None
    limit = policy.max_restarts if policy.racing else policy.min_restarts
    carried_failure = next((r for r in restarts if not r.ok), None)
    if carried_failure is not None:
        state, reason = TrialState.FAIL, f"restart {carried_failure.restart} {carried_failure.status}: {carried_failure.error}"
    # A retry's starts were announced by the worker that died and held while the trial waited, but never checked
    # here: while a peer was failing that trial its hold was briefly gone, and another start may have taken it.
    resumed = bool(restarts)
    for j in range(len(counted), limit if carried_failure is None else 0):
        if resumed and j == len(counted) and not _search_may_start(ledger, options, [], ctx.space):
            if not values:
                state, reason = TrialState.PRUNED, "no counted restart: the budget left no room to resume it"
            break
        if j >= policy.min_restarts:
            # Announce the next start before checking the budget, so two workers never both take the last one.
            ledger.record_planned_starts(trial, len(restarts) + 1)
            if not _search_may_start(ledger, options, [(config.key(), False)], ctx.space):
                ledger.record_planned_starts(trial, len(restarts))
                break  # budget: keep what we have
        ran = measure_restart(ctx.engine, config, ctx.space.workload, restart=j,
                              seed=options.search_seed(j), on_result=on_result, rerun_cold=rerun_cold)
        last = ran[-1]
        if not last.ok:
            state, reason = TrialState.FAIL, f"restart {j} {last.status}: {last.error}"
            break
        if not counts(last):
            if estimate is not None:
                reason = ("screened on its cold start: the bound on its warm throughput predicted from it is below "
                          "the incumbent's mean")
            elif not values:
                state, reason = TrialState.PRUNED, "no counted restart: the budget left no room for a warm rerun"
            break
        values.append(float(last.value))  # type: ignore[arg-type]
        trial.report(float(last.value), step=j)  # type: ignore[arg-type]
        if trial.should_prune():
            state, reason = TrialState.PRUNED, "raced out: interval below the incumbent's"
            break
        decision = decide_trial(study, trial.number, values, policy)
        if decision != Decision.MORE:
            break
    ledger.record_planned_starts(trial, len(restarts))
    summary = _flag_speculation_change(ledger, config,
                                       summarize(config, restarts, options.confidence, options.interval_method,
                                                 ctx.space.workload.unit, counts=counts))
    ledger.record_summary(trial, summary)
    latency = summarize_latency(restarts, options.confidence)
    limits = ctx.space.slo_constraints
    ledger.record_latency(trial, latency, check_slo(latency, limits) if limits else None)
    if reason and state == TrialState.FAIL:
        ledger.record_failure(trial, reason)
    elif reason:
        ledger.record_pruned(trial, reason)
    # A screened trial tells the sampler its predicted warm throughput (a GP ignores pruned trials, TPE ranks them
    # below every complete one); with no counted restart it is never the incumbent nor a verification candidate.
    value = estimate if estimate is not None and not values else summary.mean
    if state == TrialState.COMPLETE:
        study.tell(trial, value)
    else:
        study.tell(trial, state=state)
    return TrialRecord(trial.number, state.name, config, tuple(restarts), summary,
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


def _next_trial(ctx: StudyContext) -> optuna.Trial | None:
    """The next trial for this worker: a retry of a dead worker's trial first, else a new suggestion if the
    trial count and the budget allow one. ``None``: the search is over (or only other workers' trials remain,
    and this worker waits a poll interval first, since one of them may yet come back as a retry)."""
    ledger, study, options = ctx.ledger, ctx.study, ctx.options
    while True:
        ledger.fail_stale()
        check_budget(ledger, ctx.space, options)  # a minutes budget is known to be too small once starts are priced
        finished, running, retries, queued = ledger.search_counts()
        for waiting in retries:
            trial = ledger.pop_waiting(waiting)
            if trial is not None:
                # Its starts were held while it waited, one more for a cold first start here included.
                landed = len(ledger.restarts(waiting))
                planned = ledger.planned_starts(waiting)
                ledger.record_planned_starts(trial, (landed + options.policy.min_restarts if planned is None
                                                     else planned) + 1)
                return trial
        stopped = ledger.search_stopped() is not None or ledger.search_closed()
        verdict = ledger.cold_verdict()
        if (not stopped and finished + running + len(retries) < options.trials
                # A queued trial's starts are held already; a new suggestion's are not.
                and _search_may_start(ledger, options, [] if queued else _entry_starts(options, verdict), ctx.space)):
            if not queued and options.sampler != "random" and finished + running < START_DESIGN_TRIALS:
                _queue_spread(ctx, len(study.trials))  # the start design (the random control keeps its own draws)
            with warnings.catch_warnings():
                # Optuna warns that heartbeats are meant for Study.optimize; this worker beats for its trials
                # itself (autotune.store.heartbeat), which is what optimize would do.
                warnings.filterwarnings("ignore", message="Heartbeat of storage", category=UserWarning)
                trial = study.ask()  # a new suggestion, or a queued trial (baselines, --enqueue, a retry)
            ledger.record_owner(trial, ctx.owner)
            landed = len(ledger.restarts(study._storage.get_trial(trial._trial_id)))
            ledger.record_planned_starts(trial, landed + _first_starts(options, landed, verdict))
            ctx.claims.heartbeat.hold(trial._trial_id)
            # Announced; now check again with this trial's starts held: of two workers that both saw room for
            # the last starts, at least one sees the other's announcement and gives its trial back. The same for a
            # worker that closed the search meanwhile (below).
            closed = ledger.search_closed()
            if not closed and _search_may_start(ledger, options, [], ctx.space):
                return trial
            _give_back(ctx, trial, "not started: another worker closed the search" if closed else
                       "not started: the engine-start budget went to trials other workers started")
            continue
        if running == 0 and not retries:
            if ledger.search_closed() or not options.verify:
                return None  # without verification nothing is chosen after the search (a resume may extend it)
            # Nothing to start and nothing running: close the search, then look once more. A trial another worker
            # announced meanwhile is either seen here (and waited for) or sees the closed search in its own second
            # check (and is given back), so verification chooses from every search trial there will be, and the
            # starts it leaves over (a runner-up's) are not also taken by a late search trial.
            ledger.record_search_closed()
            continue
        ctx.sleep(ctx.poll_s)


def _give_back(ctx: StudyContext, trial: optuna.Trial, reason: str) -> None:
    ctx.ledger.record_interrupted(trial, reason)
    ctx.ledger.record_planned_starts(trial, 0)
    ctx.study.tell(trial, state=TrialState.FAIL)
    ctx.claims.heartbeat.release(trial._trial_id)


def _search(ctx: StudyContext, observers: Sequence[StudyObserver]) -> None:
    ledger = ctx.ledger
    idle = 0
    while True:
        if idle >= MAX_IDLE_SUGGESTIONS and ledger.search_stopped() is None:
            ledger.record_search_stopped(f"{idle} suggestions in a row were repeats or infeasible: "
                                         "the sampler has converged on what it measured")
        trial = _next_trial(ctx)
        if trial is None:
            return
        ledger.record_owner(trial, ctx.owner)
        ctx.claims.heartbeat.hold(trial._trial_id)
        try:
            idle = 0 if _run_trial(ctx, trial, observers) else idle + 1
            _stop_if_the_baseline_failed(ctx, trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker failed this trial: no heartbeat of ours reached the storage for the grace period
            # (a storage outage, a frozen process). It is queued again with what it had; this worker moves on.
            print(f"autotune: trial {trial.number} was taken over by another worker (this worker's heartbeat did "
                  "not reach the storage); carrying on with the next one", file=sys.stderr)
        finally:
            ctx.claims.heartbeat.release(trial._trial_id)


def _stop_if_the_baseline_failed(ctx: StudyContext, trial: optuna.Trial) -> None:
    """Stop the search when the engine defaults failed on the engine (not an interruption): every speedup is
    against them, so nothing the search measures could be claimed, and a setup that cannot start the defaults
    (a model that cannot be loaded, no network for the hub, too little memory) fails every other configuration
    too. Verification still runs the baseline on fresh seeds, and the study ends with its reason."""
    ledger = ctx.ledger
    frozen = ctx.study._storage.get_trial(trial._trial_id)
    if (frozen.state != TrialState.FAIL or ledger.search_stopped() is not None or ledger.interrupted(frozen)
            or ledger.config_key(frozen) != ctx.space.baseline().key()):
        return
    ledger.record_search_stopped(f"the baseline (engine defaults) failed ({ledger.failure(frozen)}): no speedup "
                                 "can be claimed without it, and a setup that cannot start it fails the rest too")


def _run_trial(ctx: StudyContext, trial: optuna.Trial, observers: Sequence[StudyObserver]) -> bool:
    """Suggest, check and measure one trial. Returns whether it started an engine."""
    ledger, study = ctx.ledger, ctx.study
    try:
        config = ctx.space.suggest(trial)
    except Infeasible as exc:
        ledger.record_infeasible(trial, str(exc))
        study.tell(trial, state=TrialState.PRUNED)
        return False
    ledger.record_config(trial, config)
    duplicate = ledger.find_duplicate(config.key(), trial.number)
    if duplicate is not None:
        # Queued while this trial still runs: a worker closing the search (_next_trial) sees either this trial
        # running or the queued one, never neither.
        _queue_unmeasured(ctx, trial.number)
        _tell_duplicate(ledger, trial, duplicate)
        return False
    notify(observers, "on_trial_start", ctx, trial.number, config)
    try:
        record = _measure_trial(ctx, trial, config, observers)
    except KeyboardInterrupt as exc:
        _abandon(ledger, trial, _interruption(exc))
        raise
    notify(observers, "on_trial_end", ctx, record)
    return True


def _queue_unmeasured(ctx: StudyContext, number: int) -> None:
    """After a repeated suggestion, queue a configuration drawn uniformly from those not measured yet.

    A sampler that repeats a measured configuration has stopped exploring (TPE does once one region dominates its
    model). The repeat is answered from the record and starts nothing; the trial after it explores instead, so the
    budget keeps buying information rather than ending the study with starts unspent. The draw is Optuna's
    ``RandomSampler`` over the same define-by-run space, seeded by the study's seed and the repeat's number; when
    :data:`EXPLORE_DRAWS` draws all hit measured or infeasible configurations nothing is queued, and the search
    ends on repeats as before (:data:`MAX_IDLE_SUGGESTIONS`).
    """
    measured = ctx.ledger.measured_keys()
    for params, config in _random_draws(ctx, number):
        if config.key() not in measured:
            ctx.study.enqueue_trial(params, skip_if_exists=True)
            return


def _random_draws(ctx: StudyContext, number: int) -> Iterator[tuple[dict[str, Any], EngineConfig]]:
    """The feasible ones of :data:`EXPLORE_DRAWS` draws of Optuna's ``RandomSampler`` over the space, as
    ``(params, config)``; seeded by the study's seed and ``number``, so a resume draws the same."""
    draws = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=ctx.options.search_seed(number)))
    for _ in range(EXPLORE_DRAWS):
        draw = draws.ask()
        try:
            config = ctx.space.suggest(draw)
        except Infeasible:
            continue
        yield draw.params, config


#: Search trials (baselines included) whose configurations come from the spread-out start design
#: (:func:`_queue_spread`): TPE's own ``n_startup_trials``, so the design replaces its independent random draws
#: (with ``--sampler gp`` too, whose model then starts from the same ten points).
START_DESIGN_TRIALS = 10


_ABSENT = object()


def _param_distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """How many parameters two points of the define-by-run space differ in; one only one side has (the draft of a
    configuration with speculation on) counts. Numbers count as categories: a distance over their range would push
    the design to the ends of each range (K = 0 and the largest K)."""
    return sum(a.get(name, _ABSENT) != b.get(name, _ABSENT) for name in set(a) | set(b))


def _queue_spread(ctx: StudyContext, number: int) -> None:
    """Queue the start design's next configuration: of :data:`EXPLORE_DRAWS` random draws, the one farthest (its
    nearest neighbour farthest, :func:`_param_distance`) from every configuration the study has tried.

    Independent random draws cluster by chance; with the 10-20 configurations a small budget measures, a whole
    mode or draft can go unmeasured. A maximin choice among random candidates spreads the same number of draws
    over every dimension (a space-filling start, as BoTorch starts from Sobol points), for any landscape: it
    reads only the space and the trials' parameters.
    """
    trials = [t for t in ctx.study.get_trials(deepcopy=False) if t.params]
    if not trials:
        return
    best, best_distance = None, 0
    for params, _ in _random_draws(ctx, number):
        nearest = min(_param_distance(params, t.params) for t in trials)
        if nearest > best_distance:  # ties keep the earlier draw: the choice among equals stays random
            best, best_distance = params, nearest
    if best is not None:
        ctx.study.enqueue_trial(best, skip_if_exists=True)


def _interruption(exc: KeyboardInterrupt) -> str:
    """What stopped the study, in words: a signal other than SIGINT says its name."""
    name = getattr(exc, "signal_name", None)
    return f"interrupted by {name}" if name else "interrupted by user (Ctrl-C)"


def _abandon(ledger: Ledger, trial: optuna.Trial, reason: str) -> None:
    """An interruption mid-trial: fail it as interrupted and queue its parameters to run again on resume."""
    ledger.record_interrupted(trial, reason)
    ledger.record_planned_starts(trial, 0)
    ledger.study.tell(trial, state=TrialState.FAIL)
    ledger.study.enqueue_trial(dict(trial.params), skip_if_exists=False)


# -- verification ----------------------------------------------------------------------------------------


def select_candidates(ledger: Ledger, space: SearchSpace, top_k: int, runner_up: bool = False) -> list[Candidate]:
    """Up to top-k engine plans by shrunk search estimate (and a runner-up), then the baseline (see
    :func:`select_verified`)."""
    evidence = []
    complete = ledger.measured_complete()
    # Under latency limits only configurations that met them are candidates, as long as any did: a fast one that
    # misses a limit cannot win, and verifying it would take a slot from one that can.
    feasible = [t for t in complete if _feasible(t)]
    for t in feasible or complete:
        summary = ledger.summary(t)
        config = ledger.config(t)
        if summary is not None and summary.values and config is not None:
            evidence.append(SearchEvidence.from_summary(t.number, config, summary))
    return select_verified(evidence, space.baseline(), top_k, runner_up)


def _verify_may_start(ledger: Ledger, options: StudyOptions, participants: Sequence[Candidate]) -> bool:
    """Whether a round of warm restarts of ``participants`` fits the whole study's budget."""
    return _starts_fit(ledger, options, [(c.config.key(), False) for c in participants])


def _starts_fit(ledger: Ledger, options: StudyOptions, starts: Sequence[Start]) -> bool:
    """Whether ``starts`` more engine starts fit the whole study's budget (restarts, and minutes at their price)."""
    used, minutes = ledger.budget_used()
    if options.budget_restarts is not None and used + len(starts) > options.budget_restarts:
        return False
    if options.budget_minutes is not None and minutes + StartCosts.of(ledger).forecast(starts) > options.budget_minutes:
        return False
    return True


def _runnable(space: SearchSpace, candidate: Candidate) -> Candidate:
    """The candidate with its configuration rebuilt from the space: stored ones have their credentials redacted."""
    config = space.baseline() if candidate.role == BASELINE else space.config_from_params(candidate.config.params)
    if config.key() != candidate.config.key():
        raise RuntimeError(f"verification candidate {candidate.config.label()} no longer matches the space "
                           "it was chosen from")  # the study fingerprint check stops edited spaces before this
    return dataclasses.replace(candidate, config=config)


def _feasible(trial: FrozenTrial) -> bool:
    """Optuna's record of whether the trial met every constraint (True when the study has none)."""
    return all(v <= 0.0 for v in trial.constraints.values())


def _candidates(ctx: StudyContext) -> list[Candidate]:
    """The configurations to verify, chosen once. Every worker that gets here chooses the same ones (the search
    is over, so the trials they choose from are the same); the first to store them fixes them for resumes."""
    ledger = ctx.ledger
    candidates = ledger.verify_candidates()
    if candidates is None:
        # A runner-up for the first round (autotune.decisions.verification.first_round_cut) when a start is left over for it: the
        # search stops once a new configuration's cold and warm starts no longer fit, which often leaves one. It
        # is the cheapest evidence that can change the pick (docs/benchmarks.md); it takes nothing from the search.
        options = ctx.options
        runner_up = options.verify_restarts >= 1 and _starts_fit(ledger, options, [
            *_verify_plan(ledger, ctx.space, options), *_runner_up_starts(ledger)])
        candidates = select_candidates(ledger, ctx.space, _verify_top_k(ledger, options), runner_up)
        ledger.record_verify_candidates(candidates)
    return [_runnable(ctx.space, c) for c in candidates]


def _verify_round(ctx: StudyContext, observers: Sequence[StudyObserver], candidates: Sequence[Candidate],
                  rnd: int, claim: Any) -> None:
    """Round ``rnd`` on this worker: what earlier holders of the round ran is kept, the rest is run here."""
    ledger, options = ctx.ledger, ctx.options
    rounds = _all_rounds(ledger)
    failed = {key for by_key in rounds.values() for key, runs in by_key.items()
              if any(not RestartResult.from_dict(d).ok for d in runs)}
    mine: dict[str, list[RestartResult]] = {}

    def record(cand: Candidate, result: RestartResult) -> None:
        mine.setdefault(cand.config.key(), []).append(result)
        claim.record_restarts(mine)
        notify(observers, "on_restart", ctx, "verify", f"verify {cand.config.label()}", result)

    run_round(ctx.engine, ctx.space.workload, candidates, rnd, options.verify_seed(rnd), rounds.get(rnd, {}), failed,
              record)


def _all_rounds(ledger: Ledger) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Verification restarts by round and configuration: the rounds' claims, and what a single-process autotune
    of an earlier version stored for a study it verified in part."""
    rounds = split_rounds(ledger.verify_progress())
    for rnd, by_key in ledger.verify_rounds().items():
        for key, runs in by_key.items():
            rounds.setdefault(rnd, {}).setdefault(key, []).extend(runs)
    return rounds


def _progress(ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    """Every verification restart by config key, in round order (what the near-tie rule and the conclusion read)."""
    progress: dict[str, list[dict[str, Any]]] = {}
    for _, by_key in sorted(_all_rounds(ledger).items()):
        for key, runs in by_key.items():
            progress.setdefault(key, []).extend(runs)
    return progress


def _verify(ctx: StudyContext, observers: Sequence[StudyObserver]) -> Verification | None:
    """Verification rounds spread over the workers, one claim per round; the conclusion by exactly one worker.

    The common rounds (``verify_restarts`` of them) run at once on as many workers, except that with a runner-up
    the rounds after the first wait for it (who runs them is decided on it, :func:`round_participants`); the
    near-tie rounds after them each depend on the rounds before, so they run one at a time. Returns the
    verification if this worker concluded it, else ``None``.
    """
    ledger, options, claims = ctx.ledger, ctx.options, ctx.claims
    candidates = _candidates(ctx)
    common = options.verify_restarts
    cap = max(common, options.verify_max_restarts or common)
    jobs = [ledger.verify_round_job(r) for r in range(cap)]
    cut_waits = any(c.runner_up for c in candidates)
    while not ledger.has_verification():
        claims.refresh()
        pending = [r for r in range(common) if not claims.done(jobs[r])]
        if not pending:
            break
        ready = [r for r in pending if r == 0 or not cut_waits or claims.done(jobs[0])]
        for rnd in ready:
            claim = claims.try_claim(jobs[rnd])
            if claim is not None:
                participants = round_participants(candidates, _progress(ledger), rnd, common, options.confidence)
                assert participants is not None  # only the near-tie rounds after the common ones can be skipped
                _verify_round(ctx, observers, participants, rnd, claim)
                claim.complete()
                break
        else:
            ctx.sleep(ctx.poll_s)  # every pending round is held by a live worker
    for rnd in range(common, cap):
        if ledger.has_verification():
            break
        participants = round_participants(candidates, _progress(ledger), rnd, common, options.confidence)
        if participants is None:
            break  # the leading challenger is settled
        claim = claims.wait_for(jobs[rnd], ctx.poll_s, ctx.sleep)
        if claim is None:
            continue  # another worker ran this round
        if _verify_may_start(ledger, options, participants):
            _verify_round(ctx, observers, participants, rnd, claim)
        claim.complete()  # a round the budget leaves out stays empty: the next one finds no tie to break
    claim = None if ledger.has_verification() else claims.wait_for(VERIFY_CONCLUDE_JOB, ctx.poll_s, ctx.sleep)
    if claim is None:
        return None
    verification = conclude(candidates, _progress(ledger), common, options.confidence, options.interval_method,
                            max_restarts=cap, slo=ctx.space.slo_constraints, unit=ctx.space.workload.unit)
    ledger.record_verification(verification)
    ctx.concluded = True
    notify(observers, "on_verification_end", ctx, verification)
    claim.complete()
    return verification


# -- the whole study -------------------------------------------------------------------------------------


def _record_metadata(ctx: StudyContext) -> None:
    options, ledger = ctx.options, ctx.ledger
    _, why = make_sampler(options.sampler, options.seed)
    ledger.record_meta(StudyMeta(
        space_name=ctx.space.name,
        space_file=ctx.space.source,
        engine=ctx.engine_info,
        model=ctx.space.engine_args.get("model"),
        workload=ctx.space.workload.to_dict(),
        sampler_why=why,
        baseline=ctx.space.baseline(),
        engine_options={k: _ledger.redact(v) if isinstance(v, str) else v for k, v in ctx.engine.options.items()},
        objective=ctx.space.objective,
        slo=ctx.space.slo,
        **options.stored_settings(),  # the settings a joining worker reads back (StudyOptions.from_meta)
    ))
    if ledger.space_yaml() is None:
        ledger.record_space_yaml(Path(ctx.space.source).read_text() if os.path.exists(ctx.space.source)
                                 else json.dumps(dict(ctx.space.raw)))


def run_study(space: SearchSpace, engine: EngineBackend, options: StudyOptions,
              observers: Sequence[StudyObserver] = (), *, worker: int | None = None, gpus: str | None = None,
              sleep: Callable[[float], None] = time.sleep, poll_s: float = DEFAULT_POLL_S) -> Ledger:
    """Run (or resume, or join) a whole study: baselines, search, verification. Returns the study's ledger.

    Any number of processes may run this on the same study at once (each a worker); the study ends for each
    when it is verified.

    Args:
        worker: This worker's index among the workers (``None``: a lone process), for the sampler's seed and
            the record of who ran what.
        gpus: The GPUs this worker's engines see (``CUDA_VISIBLE_DEVICES``), recorded with its trials.
        sleep: How waiting for other workers passes (the scaling benchmark's simulated clock).
        poll_s: Seconds between looks at the study while waiting for other workers.

    Raises:
        Interrupted: Ctrl-C or SIGTERM; everything finished so far is stored and the same command resumes.
        autotune.store.ledger.LedgerError: the stored study has a schema this autotune does not read.
    """
    ctx = _open(space, engine, options, worker, gpus, sleep, poll_s)
    ledger = ctx.ledger
    # A study concluded in an earlier session: this process repairs what tracking may have missed, as the one
    # that concluded it would (everything an observer logs is logged once, whoever asks).
    ctx.concluded = ledger.has_verification()
    try:
        notify(observers, "on_study_start", ctx)
        try:
            _search(ctx, observers)
            if options.verify and not ledger.has_verification():
                _verify(ctx, observers)
            elif not ledger.has_verification():
                # No verification: the study is over once the search is; one worker closes it.
                claim = ctx.claims.try_claim(_ledger.FINISH_JOB.format(ledger.finished_search_trials()))
                if claim is not None:
                    ctx.concluded = True
                    claim.complete()
        except KeyboardInterrupt as exc:
            stop_live()  # an engine the interruption caught between its start and its cleanup
            raise Interrupted(f"{_interruption(exc)}; finished work is saved in {_ledger.redact(str(options.storage))}"
                              " - run the same command again to resume", getattr(exc, "signum", signal.SIGINT)) from None
        notify(observers, "on_study_end", ctx)
    finally:
        ctx.claims.heartbeat.close()
    return ledger


def prepare_study(space: SearchSpace, engine: EngineBackend, options: StudyOptions) -> Ledger:
    """Create (or open) the study and record everything a worker needs to join it, without running anything:
    ``autotune tune --gpus`` does this before it starts its workers."""
    ctx = _open(space, engine, options, None, None, time.sleep, DEFAULT_POLL_S)
    ctx.claims.heartbeat.close()
    return ctx.ledger


def _open(space: SearchSpace, engine: EngineBackend, options: StudyOptions, worker: int | None, gpus: str | None,
          sleep: Callable[[float], None], poll_s: float) -> StudyContext:
    # Before anything is deleted: the study's directory must be one autotune created (or none yet).
    check_owned(options.workdir, options.study_name)
    # An autotune killed with SIGKILL could not stop its engines: they would hold the GPU and skew every restart.
    stop_orphans()
    ledger, resumed = open_study(options, worker)
    # Starting over means cold caches too: a study-local compile cache left by the deleted study would make its
    # first starts look warm. Only a directory autotune created for this study is emptied.
    cache_dir = str(prepare_study_dir(options.workdir, options.study_name, fresh=options.fresh))
    facts = EngineFacts.of(engine.describe())
    measures = fingerprint(space, facts)
    stored = ledger.fingerprint()
    if resumed:
        check_resume(stored, measures, options.study_name)
    if stored is None:
        ledger.record_fingerprint(measures)
    engine.cache_dir = engine.cache_dir or cache_dir
    heartbeat = Heartbeat(ledger.study._storage)
    owner = _ledger.owner_id(worker, gpus, cache_dir)
    ctx = StudyContext(options, space, engine, facts, ledger, resumed,
                       claims=Claims(ledger.study, heartbeat, owner), owner=owner, poll_s=poll_s, sleep=sleep)
    if not resumed or not ledger.baselines_enqueued():
        # The process that created the study queues its first trials (a worker that joins finds them queued).
        for params in [*space.baseline_params(), *options.enqueue]:
            ledger.study.enqueue_trial(dict(params))
        ledger.record_baselines_enqueued()
    check_budget(ledger, space, options)  # before any engine starts (a minutes budget: when starts are on record)
    _record_metadata(ctx)
    return ctx
