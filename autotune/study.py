"""The study: an Optuna ask/tell loop over fresh-restart trials, then verification of the best against the baseline.

Everything a study learns is in Optuna's storage (SQLite under ``mlruns/`` by default), written as it
happens, so the same command after Ctrl-C or ``kill -9`` resumes: finished trials are kept, trials left
RUNNING are marked failed and retried, and verification restarts already run are not run again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import warnings
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import ledger as _ledger
from autotune.engines import EngineBackend
from autotune.engines._process import stop_live, stop_orphans
from autotune.events import StudyContext, StudyObserver, notify
from autotune.fingerprint import check_resume, fingerprint
from autotune.ledger import DEFAULT_STORAGE, Ledger, StudyMeta, TrialRecord
from autotune.measure import TrialSummary, measure_restart, summarize
from autotune.options import StudyOptions
from autotune.racing import Decision, RacingPruner, decide_trial
from autotune.records import EngineConfig, EngineFacts, RestartResult, speculation_plan_change
from autotune.space import Infeasible, SearchSpace
from autotune.studydir import check_owned, prepare_study_dir
from autotune.verify import BASELINE, Candidate, SearchEvidence, Verification, run_verification
from autotune.verify import select_candidates as select_verified

__all__ = [
    "DEFAULT_STORAGE",
    "Interrupted",
    "StudyContext",
    "StudyOptions",
    "TrialRecord",
    "make_sampler",
    "run_study",
    "select_candidates",
]

#: Give up after this many suggestions in a row that start no engine (duplicates, infeasible): space exhausted.
MAX_IDLE_SUGGESTIONS = 30

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
    """The sampler and a sentence saying why, recorded in the study's metadata."""
    if name == "tpe":
        with warnings.catch_warnings():  # group= is "experimental" but is what makes TPE handle the conditional space
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed, n_startup_trials=6)
        why = ("TPE (multivariate, group): handles the conditional space (draft only when K > 0) natively; "
               "it is told the mean over matched restarts of each trial")
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


def open_study(options: StudyOptions) -> tuple[Ledger, bool]:
    """Create or load the study. Returns ``(ledger, resumed)``."""
    sampler, _ = make_sampler(options.sampler, options.seed)
    pruner = RacingPruner(options.policy) if options.policy.racing else optuna.pruners.NopPruner()
    return _ledger.create_or_load(options.study_name, options.storage, sampler=sampler, pruner=pruner,
                                  fresh=options.fresh)


# -- budget ----------------------------------------------------------------------------------------------


def _search_may_start(ledger: Ledger, options: StudyOptions, extra: int) -> bool:
    """Whether ``extra`` more search restarts fit the budget with verification's share held back."""
    used, minutes = ledger.budget_used()
    reserve = options.verify_reserve
    if options.budget_restarts is not None and used + extra + reserve > options.budget_restarts:
        return False
    if options.budget_minutes is not None:
        per_restart = minutes / used if used else 0.0
        if minutes + (extra + reserve) * per_restart > options.budget_minutes:
            return False
    return True


# -- the search ------------------------------------------------------------------------------------------


def _tell_duplicate(ledger: Ledger, trial: optuna.Trial, original: FrozenTrial) -> None:
    ledger.record_duplicate(trial, original)
    if original.state == TrialState.COMPLETE:
        ledger.study.tell(trial, original.value)
    else:
        ledger.study.tell(trial, state=original.state)


def _measure_trial(ctx: StudyContext, trial: optuna.Trial, config: EngineConfig,
                   observers: Sequence[StudyObserver]) -> TrialRecord:
    """Run restarts of ``config`` until racing says stop; record every restart on the trial as it lands."""
    options, ledger, study = ctx.options, ctx.ledger, ctx.study
    policy = options.policy
    restarts: list[RestartResult] = []
    values: list[float] = []

    def on_result(result: RestartResult) -> None:
        restarts.append(result)
        ledger.record_restarts(trial, restarts)
        notify(observers, "on_restart", ctx, "search", f"trial {trial.number}", result)

    state, reason = TrialState.COMPLETE, None
    limit = policy.max_restarts if policy.racing else policy.min_restarts
    for j in range(limit):
        ran = measure_restart(ctx.engine, config, ctx.space.workload, restart=j,
                              seed=options.search_seed(j), on_result=on_result)
        last = ran[-1]
        if not last.ok:
            state, reason = TrialState.FAIL, f"restart {j} {last.status}: {last.error}"
            break
        values.append(float(last.value))  # type: ignore[arg-type]
        trial.report(float(last.value), step=j)  # type: ignore[arg-type]
        if trial.should_prune():
            state, reason = TrialState.PRUNED, "raced out: interval below the incumbent's"
            break
        decision = decide_trial(study, trial.number, values, policy)
        if decision != Decision.MORE:
            break
        if not _search_may_start(ledger, options, 1):
            break  # budget: keep what we have
    summary = _flag_speculation_change(ledger, config,
                                       summarize(config, restarts, options.confidence, options.interval_method))
    ledger.record_summary(trial, summary)
    if reason and state == TrialState.FAIL:
        ledger.record_failure(trial, reason)
    elif reason:
        ledger.record_pruned(trial, reason)
    if state == TrialState.COMPLETE:
        study.tell(trial, summary.mean)
    else:
        study.tell(trial, state=state)
    return TrialRecord(trial.number, state.name, config, tuple(restarts), summary,
                       reason if state == TrialState.FAIL else None,
                       value=summary.mean if state == TrialState.COMPLETE else None)


def _flag_speculation_change(ledger: Ledger, config: EngineConfig, summary: TrialSummary) -> TrialSummary:
    """Add the default capture mode speculation changed (see :func:`speculation_plan_change`) to the trial's
    differences, so the trial, the report and MLflow all flag it."""
    if config.cudagraph_mode is not None or not config.num_speculative_tokens:
        return summary  # only a default mode with speculation on can hide this change
    change = speculation_plan_change(config, summary.resolved_mode, ledger.mode_without_speculation(config))
    if change is None or any(d.startswith(f"{change.field}:") for d in summary.differences):
        return summary  # already flagged (a default that resolved to NONE)
    return dataclasses.replace(summary, differences=(*summary.differences, str(change)))


def _search(ctx: StudyContext, observers: Sequence[StudyObserver]) -> None:
    ledger, study, options = ctx.ledger, ctx.study, ctx.options
    idle = 0
    while ledger.finished_search_trials() < options.trials:
        if idle >= MAX_IDLE_SUGGESTIONS:
            ledger.record_search_stopped(f"{idle} suggestions in a row were repeats or infeasible: "
                                         "the sampler has converged on what it measured")
            break
        if not _search_may_start(ledger, options, options.policy.min_restarts):
            break
        trial = study.ask()
        try:
            config = ctx.space.suggest(trial)
        except Infeasible as exc:
            ledger.record_infeasible(trial, str(exc))
            study.tell(trial, state=TrialState.PRUNED)
            idle += 1
            continue
        ledger.record_config(trial, config)
        duplicate = ledger.find_duplicate(config.key(), trial.number)
        if duplicate is not None:
            _tell_duplicate(ledger, trial, duplicate)
            idle += 1
            continue
        idle = 0
        notify(observers, "on_trial_start", ctx, trial.number, config)
        try:
            record = _measure_trial(ctx, trial, config, observers)
        except KeyboardInterrupt as exc:
            _abandon(ledger, trial, _interruption(exc))
            raise
        notify(observers, "on_trial_end", ctx, record)


def _interruption(exc: KeyboardInterrupt) -> str:
    """What stopped the study, in words: a signal other than SIGINT says its name."""
    name = getattr(exc, "signal_name", None)
    return f"interrupted by {name}" if name else "interrupted by user (Ctrl-C)"


def _abandon(ledger: Ledger, trial: optuna.Trial, reason: str) -> None:
    """An interruption mid-trial: fail it as interrupted and queue its parameters to run again on resume."""
    ledger.record_interrupted(trial, reason)
    ledger.study.tell(trial, state=TrialState.FAIL)
    ledger.study.enqueue_trial(dict(trial.params), skip_if_exists=False)


# -- verification ----------------------------------------------------------------------------------------


def select_candidates(ledger: Ledger, space: SearchSpace, top_k: int) -> list[Candidate]:
    """Up to top-k engine plans by shrunk search estimate, then the baseline (see :func:`select_verified`)."""
    evidence = []
    for t in ledger.measured_complete():
        summary = ledger.summary(t)
        config = ledger.config(t)
        if summary is not None and summary.values and config is not None:
            evidence.append(SearchEvidence.from_summary(t.number, config, summary))
    return select_verified(evidence, space.baseline(), top_k)


def _verify_may_start(ledger: Ledger, options: StudyOptions, extra: int) -> bool:
    """Whether ``extra`` more verification starts fit the whole study's budget."""
    used, minutes = ledger.budget_used()
    if options.budget_restarts is not None and used + extra > options.budget_restarts:
        return False
    if options.budget_minutes is not None and used and minutes + extra * minutes / used > options.budget_minutes:
        return False
    return True


def _runnable(space: SearchSpace, candidate: Candidate) -> Candidate:
    """The candidate with its configuration rebuilt from the space: stored ones have their credentials redacted."""
    config = space.baseline() if candidate.role == BASELINE else space.config_from_params(candidate.config.params)
    if config.key() != candidate.config.key():
        raise RuntimeError(f"verification candidate {candidate.config.label()} no longer matches the space "
                           "it was chosen from")  # the study fingerprint check stops edited spaces before this
    return dataclasses.replace(candidate, config=config)


def _verify(ctx: StudyContext, observers: Sequence[StudyObserver]) -> Verification:
    ledger, options = ctx.ledger, ctx.options
    candidates = ledger.verify_candidates()
    if candidates is None:
        candidates = select_candidates(ledger, ctx.space, options.verify_top_k)
        ledger.record_verify_candidates(candidates)
    candidates = [_runnable(ctx.space, c) for c in candidates]

    def on_result(cand: Candidate, result: RestartResult) -> None:
        notify(observers, "on_restart", ctx, "verify", f"verify {cand.config.label()}", result)

    verification = run_verification(
        ctx.engine, ctx.space.workload, candidates, options.verify_restarts, options.verify_seed,
        done=ledger.verify_progress(),
        on_result=on_result,
        save_progress=ledger.record_verify_progress,
        confidence=options.confidence, interval_method=options.interval_method,
        max_restarts=options.verify_max_restarts, may_start=lambda n: _verify_may_start(ledger, options, n),
    )
    ledger.record_verification(verification)
    notify(observers, "on_verification_end", ctx, verification)
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
        sampler=options.sampler,
        sampler_why=why,
        racing=dataclasses.asdict(options.policy),
        top_k=options.verify_top_k,
        verify_restarts=options.verify_restarts,
        verify_max_restarts=options.verify_max_restarts,
        budget_restarts=options.budget_restarts,
        budget_minutes=options.budget_minutes,
        trials=options.trials,
        seed=options.seed,
        command=tuple(options.command),
        baseline=ctx.space.baseline(),
    ))
    ledger.record_space_yaml(Path(ctx.space.source).read_text() if os.path.exists(ctx.space.source)
                             else json.dumps(dict(ctx.space.raw)))


def run_study(space: SearchSpace, engine: EngineBackend, options: StudyOptions,
              observers: Sequence[StudyObserver] = ()) -> Ledger:
    """Run (or resume) a whole study: baselines, search, verification. Returns the study's ledger.

    Raises:
        Interrupted: Ctrl-C or SIGTERM; everything finished so far is stored and the same command resumes.
        autotune.ledger.LedgerError: the stored study has a schema this autotune does not read.
    """
    # Before anything is deleted: the study's directory must be one autotune created (or none yet).
    check_owned(options.workdir, options.study_name)
    # An autotune killed with SIGKILL could not stop its engines: they would hold the GPU and skew every restart.
    stop_orphans()
    ledger, resumed = open_study(options)
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
    ctx = StudyContext(options, space, engine, facts, ledger, resumed)
    ledger.recover_interrupted()
    if not ledger.baselines_enqueued():
        for params in [*space.baseline_params(), *options.enqueue]:
            ledger.study.enqueue_trial(dict(params))
        ledger.record_baselines_enqueued()
    _record_metadata(ctx)
    notify(observers, "on_study_start", ctx)
    try:
        _search(ctx, observers)
        if options.verify and not ledger.has_verification():
            _verify(ctx, observers)
    except KeyboardInterrupt as exc:
        stop_live()  # an engine the interruption caught between its start and its cleanup
        raise Interrupted(f"{_interruption(exc)}; finished work is saved in {options.storage} - run the same "
                          "command again to resume", getattr(exc, "signum", signal.SIGINT)) from None
    notify(observers, "on_study_end", ctx)
    return ledger
