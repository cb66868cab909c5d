"""The search: ask Optuna for the next trial (a retry first), measure it, tell the result; until the trial count,
the budget or the sampler's repeats end it.

Several workers may search one study at once: each announces the engine starts of the trial it takes before it
checks the budget, so two never both take the last ones, and a worker closing the search sees every trial that
will run (:func:`_next_trial`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config.space import Infeasible
from autotune.store import frozen_trial, trial_id
from autotune.store.ledger import Ledger, trial_failed
from autotune.store.search_end import BASELINE_FAILED, CONVERGED, INFEASIBLE
from autotune.store.orphans import requeue_orphans
from autotune.study._budget import _entry_starts, _first_starts, _search_may_start, check_budget
from autotune.study._start_design import START_DESIGN_TRIALS, _queue_spread, _queue_unmeasured
from autotune.study._stopping import search_end
from autotune.study._trial import TrialMeasurement
from autotune.study.events import StudyContext, StudyObserver, notify

__all__ = ["MAX_IDLE_SUGGESTIONS"]

#: Give up after this many suggestions in a row that start no engine (duplicates, infeasible): space exhausted.
MAX_IDLE_SUGGESTIONS = 30


def _tell_duplicate(ledger: Ledger, trial: optuna.Trial, original: FrozenTrial) -> None:
    ledger.record_duplicate(trial, original)
    if original.state == TrialState.COMPLETE:
        ledger.study.tell(trial, original.value)
    elif original.state == TrialState.RUNNING:
        # Another worker is measuring this configuration right now: nothing to tell yet, nothing to run twice.
        ledger.study.tell(trial, state=TrialState.PRUNED)
    else:
        ledger.study.tell(trial, state=original.state)



def _next_trial(ctx: StudyContext) -> optuna.Trial | None:
    """The next trial for this worker: a retry of a dead worker's trial first, else a new suggestion if the
    trial count and the budget allow one. ``None``: the search is over (or only other workers' trials remain,
    and this worker waits a poll interval first, since one of them may yet come back as a retry)."""
    ledger, study, options = ctx.ledger, ctx.study, ctx.options
    while True:
        ledger.fail_stale()
        requeue_orphans(ledger, ctx.claims)  # a trial failed for a dead worker whose retry never came (FS01)
        check_budget(ledger, ctx.space, options, ctx.engine.least_start_s())  # a minutes budget is known to be too small once starts are priced
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
                and _search_may_start(ledger, options, [] if queued else _entry_starts(options, verdict), ctx.space,
                                      bool(ctx.engine.caches_empty()))):
            if not queued and options.sampler != "random" and finished + running < START_DESIGN_TRIALS:
                _queue_spread(ctx, len(study.trials))  # the start design (the random control keeps its own draws)
            with warnings.catch_warnings():
                # Optuna warns that heartbeats are meant for Study.optimize; this worker beats for its trials
                # itself (autotune.store.heartbeat), which is what optimize would do.
                warnings.filterwarnings("ignore", message="Heartbeat of storage", category=UserWarning)
                trial = study.ask()  # a new suggestion, or a queued trial (baselines, --enqueue, a retry)
            ledger.record_owner(trial, ctx.owner)
            landed = len(ledger.restarts(frozen_trial(study, trial)))
            ledger.record_planned_starts(trial, landed + _first_starts(options, landed, verdict))
            ctx.claims.heartbeat.hold(trial_id(trial))
            # Announced; now check again with this trial's starts held: of two workers that both saw room for
            # the last starts, at least one sees the other's announcement and gives its trial back. The same for a
            # worker that closed the search meanwhile (below).
            closed = ledger.search_closed()
            if not closed and _search_may_start(ledger, options, [], ctx.space, bool(ctx.engine.caches_empty())):
                return trial
            _give_back(ctx, trial, "not started: another worker closed the search" if closed else
                       "not started: the engine-start budget went to trials other workers started")
            continue
        if running == 0 and not retries:
            closed = ledger.search_closed()
            if not closed or ledger.search_end() is None:
                # The search ends here: say why, with the numbers (a closed search keeps the reason it closed with).
                ledger.record_search_end(search_end(ctx))
            if closed or not options.verify:
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
    ctx.claims.heartbeat.release(trial_id(trial))


def _search(ctx: StudyContext, observers: Sequence[StudyObserver]) -> None:
    ledger = ctx.ledger
    idle = started = 0
    only_infeasible = True  # every suggestion of the idle run was ruled out by the space's constraints
    while True:
        if idle >= MAX_IDLE_SUGGESTIONS and ledger.search_stopped() is None:
            ledger.record_search_stopped(f"{idle} suggestions in a row were repeats or infeasible: "
                                         "the sampler has converged on what it measured")
            what = "infeasible" if only_infeasible else "repeats or infeasible"
            ledger.record_search_end(search_end(ctx, INFEASIBLE if only_infeasible else CONVERGED,
                                                f"{idle} suggestions in a row were {what}"))
        trial = _next_trial(ctx)
        if trial is None:
            end = ledger.search_end()  # read once, not once per observer
            notify(observers, lambda o: o.on_search_end(ctx, end, started))
            return
        ledger.record_owner(trial, ctx.owner)
        ctx.claims.heartbeat.hold(trial_id(trial))
        try:
            outcome = _run_trial(ctx, trial, observers)
            if outcome == _STARTED:
                started, idle, only_infeasible = started + 1, 0, True
            else:
                idle, only_infeasible = idle + 1, only_infeasible and outcome == _INFEASIBLE
            _stop_if_the_baseline_failed(ctx, trial)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker failed this trial: no heartbeat of ours reached the storage for the grace period
            # (a storage outage, a frozen process). It is queued again with what it had; this worker moves on.
            print(f"autotune: trial {trial.number} was taken over by another worker (this worker's heartbeat did "
                  "not reach the storage); carrying on with the next one", file=sys.stderr)
        finally:
            ctx.claims.heartbeat.release(trial_id(trial))


def _stop_if_the_baseline_failed(ctx: StudyContext, trial: optuna.Trial) -> None:
    """Stop the search when the engine defaults failed on the engine (not an interruption): every speedup is
    against them, so nothing the search measures could be claimed, and a setup that cannot start the defaults
    (a model that cannot be loaded, no network for the hub, too little memory) fails every other configuration
    too. Verification still runs the baseline on fresh seeds, and the study ends with its reason."""
    ledger = ctx.ledger
    frozen = frozen_trial(ctx.study, trial)
    if (not trial_failed(frozen) or ledger.search_stopped() is not None or ledger.interrupted(frozen)
            or ledger.config_key(frozen) != ctx.space.baseline().key()):
        return
    ledger.record_search_stopped(f"the baseline (engine defaults) failed ({ledger.failure(frozen)}): no speedup "
                                 "can be claimed without it, and a setup that cannot start it fails the rest too")
    ledger.record_search_end(search_end(ctx, BASELINE_FAILED, f"engine defaults failed ({ledger.failure(frozen)})"))


#: What :func:`_run_trial` did with a suggestion.
_STARTED, _INFEASIBLE, _DUPLICATE = "started", "infeasible", "duplicate"


def _run_trial(ctx: StudyContext, trial: optuna.Trial, observers: Sequence[StudyObserver]) -> str:
    """Suggest, check and measure one trial. Returns :data:`_STARTED` (it started an engine), :data:`_INFEASIBLE`
    or :data:`_DUPLICATE`."""
    ledger, study = ctx.ledger, ctx.study
    try:
        config = ctx.space.suggest(trial)
    except Infeasible as exc:
        ledger.record_infeasible(trial, str(exc))
        study.tell(trial, state=TrialState.PRUNED)
        return _INFEASIBLE
    ledger.record_config(trial, config)
    duplicate = ledger.find_duplicate(config.key(), trial.number)
    if duplicate is not None:
        # Queued while this trial still runs: a worker closing the search (_next_trial) sees either this trial
        # running or the queued one, never neither.
        _queue_unmeasured(ctx, trial.number)
        _tell_duplicate(ledger, trial, duplicate)
        return _DUPLICATE
    notify(observers, lambda o: o.on_trial_start(ctx, trial.number, config))
    try:
        record = TrialMeasurement(ctx, trial, config, observers).run()
    except KeyboardInterrupt as exc:
        _abandon(ledger, trial, _interruption(exc))
        raise
    notify(observers, lambda o: o.on_trial_end(ctx, record))
    return _STARTED



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

