"""The study: an Optuna ask/tell loop over fresh-restart trials, then verification of the best against the baseline.

Everything a study learns is in Optuna's storage (SQLite under ``mlruns/`` by default), written as it
happens, so the same command after Ctrl-C or ``kill -9`` resumes: finished trials are kept, trials left
RUNNING are marked failed and retried, and verification restarts already run are not run again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.engines import EngineBackend
from autotune.events import StudyObserver, notify
from autotune.measure import TrialSummary, measure_restart, summarize
from autotune.racing import Decision, RacingPolicy, RacingPruner, decide_trial
from autotune.records import EngineConfig, RestartResult
from autotune.space import Infeasible, SearchSpace
from autotune.verify import Candidate, SearchEvidence, Verification, run_verification
from autotune.verify import select_candidates as select_verified

__all__ = [
    "DEFAULT_STORAGE",
    "Interrupted",
    "StudyContext",
    "StudyOptions",
    "TrialRecord",
    "load_study",
    "run_study",
]

DEFAULT_STORE_DIR = "mlruns"
DEFAULT_STORAGE = f"sqlite:///{DEFAULT_STORE_DIR}/optuna.db"
#: Search restart j of every trial uses seed base + j, so trials are compared on matched restarts.
SEARCH_SEED_OFFSET = 0
#: Verification rounds use fresh seeds the search never saw.
VERIFY_SEED_OFFSET = 50_000
#: Give up after this many suggestions in a row that start no engine (duplicates, infeasible): space exhausted.
MAX_IDLE_SUGGESTIONS = 30
#: Without ``top_k``: verify one configuration per this many budgeted engine starts, 1 to :data:`MAX_TOP_K`.
STARTS_PER_VERIFIED = 30
#: Configurations verified by default (and the most a restart budget scales to).
MAX_TOP_K = 3

optuna.logging.set_verbosity(optuna.logging.WARNING)


class Interrupted(Exception):
    """The user pressed Ctrl-C; everything finished so far is saved and the same command resumes."""


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """How a study runs.

    Attributes:
        study_name: Optuna study name (also the MLflow parent run's name).
        storage: Optuna storage URL (SQLite by default; PostgreSQL for several workers; ``memory`` keeps
            nothing, for benchmarks).
        workdir: Per-study working files (engine caches, logs) go under ``workdir/<study_name>``.
        trials: Search trials to finish (resuming counts those already finished).
        policy: Restarts per trial and racing.
        top_k: Configurations verified against the baseline at the end; ``None`` (default) scales it to
            ``budget_restarts`` (see :attr:`verify_top_k`).
        verify_restarts: Counted restarts per verified configuration.
        verify_max_restarts: Cap on counted restarts for challengers still tied with the leading one (extra
            verification rounds, the baseline alongside); ``verify_restarts`` turns extra rounds off.
        budget_restarts: Engine starts for the whole study (search + verification), or ``None``.
        budget_minutes: Engine wall minutes for the whole study, or ``None``.
        sampler: ``tpe`` (default) or ``gp``.
        seed: Sampler seed and restart-seed base.
        confidence: Interval coverage.
        interval_method: ``t`` or ``bca``.
        fresh: Delete an existing study of the same name first.
        verify: Run the verification phase.
        command: The command line that started the study (recorded for provenance).
        enqueue: Parameter sets to try right after the baselines (new studies only).
    """

    study_name: str
    storage: str = DEFAULT_STORAGE
    workdir: str = os.path.join(DEFAULT_STORE_DIR, "autotune")
    trials: int = 20
    policy: RacingPolicy = RacingPolicy()
    top_k: int | None = None
    verify_restarts: int = 3
    verify_max_restarts: int = 5
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    confidence: float = 0.95
    interval_method: str = "t"
    fresh: bool = False
    verify: bool = True
    command: tuple[str, ...] = ()
    enqueue: tuple[Mapping[str, Any], ...] = ()

    def search_seed(self, restart: int) -> int:
        return self.seed * 100_000 + SEARCH_SEED_OFFSET + restart

    def verify_seed(self, rnd: int) -> int:
        return self.seed * 100_000 + VERIFY_SEED_OFFSET + rnd

    @property
    def verify_top_k(self) -> int:
        """Configurations to verify: ``top_k`` if set, else one per 30 budgeted starts (1 to 3; 3 with no budget).

        Verifying three configurations and the baseline in three rounds costs 12 starts: 40% of a 30-start
        budget, every one of them a search trial not run. The benchmark (docs/benchmarks.md) measured the split.
        """
        if self.top_k is not None:
            return self.top_k
        if self.budget_restarts is None:
            return MAX_TOP_K
        return max(1, min(MAX_TOP_K, self.budget_restarts // STARTS_PER_VERIFIED))

    @property
    def verify_reserve(self) -> int:
        """Engine starts held back from the search for verification (top-k plus the baseline).

        Extra rounds for near-ties get no reserve of their own: they run on what the search left, including the
        share of a slot that plan sharing freed. Starts held back for them would come out of the search, which
        is where a budget of tens of starts is short (docs/benchmarks.md).
        """
        return (self.verify_top_k + 1) * self.verify_restarts if self.verify else 0


@dataclasses.dataclass
class StudyContext:
    """What observers see: the study, its space, engine and options."""

    options: StudyOptions
    space: SearchSpace
    engine: EngineBackend
    engine_info: Mapping[str, Any]
    study: optuna.Study
    cache_dir: str
    resumed: bool = False


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One finished search trial, as observers and reports see it."""

    number: int
    state: str
    config: EngineConfig
    restarts: tuple[RestartResult, ...]
    summary: TrialSummary | None
    reason: str | None = None
    duplicate_of: int | None = None

    @classmethod
    def from_frozen(cls, trial: FrozenTrial) -> TrialRecord | None:
        attrs = trial.user_attrs
        if "config" not in attrs:
            return None
        summary = attrs.get("summary")
        return cls(
            number=trial.number,
            state=trial.state.name,
            config=EngineConfig.from_dict(attrs["config"]),
            restarts=tuple(RestartResult.from_dict(r) for r in attrs.get("restarts", [])),
            summary=None if summary is None else TrialSummary.from_dict(summary),
            reason=attrs.get("failure") or attrs.get("infeasible"),
            duplicate_of=attrs.get("duplicate_of"),
        )


# -- opening and recovering ------------------------------------------------------------------------------


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


def ensure_sqlite_dir(storage: str) -> None:
    """Create the directory of a ``sqlite:///path`` URL, so the default store works on a fresh clone."""
    if storage.startswith("sqlite:///"):
        path = storage[len("sqlite:///"):]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


def make_storage(url: str) -> optuna.storages.BaseStorage:
    """Optuna storage for ``url``: ``memory`` (benchmarks and tests, nothing persisted) or an SQLAlchemy URL."""
    if url == "memory":
        return optuna.storages.InMemoryStorage()
    ensure_sqlite_dir(url)
    return optuna.storages.RDBStorage(url, heartbeat_interval=None)


def open_study(options: StudyOptions) -> tuple[optuna.Study, bool]:
    """Create or load the study. Returns ``(study, resumed)``."""
    storage = make_storage(options.storage)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if options.fresh and options.study_name in names:
        optuna.delete_study(study_name=options.study_name, storage=storage)
        names.discard(options.study_name)
    sampler, _ = make_sampler(options.sampler, options.seed)
    pruner = RacingPruner(options.policy) if options.policy.racing else optuna.pruners.NopPruner()
    resumed = options.study_name in names
    study = optuna.create_study(study_name=options.study_name, storage=storage, sampler=sampler, pruner=pruner,
                                direction="maximize", load_if_exists=True)
    return study, resumed


def load_study(study_name: str, storage: str = DEFAULT_STORAGE) -> optuna.Study:
    """Load an existing study read-only (reports, export, tracking).

    Raises:
        KeyError: no such study; the message lists the studies there are.
    """
    ensure_sqlite_dir(storage)
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
    if study_name not in names:
        have = ", ".join(names) if names else "none"
        raise KeyError(f"no study named {study_name!r} in {storage} (studies there: {have})")
    return optuna.load_study(study_name=study_name, storage=storage)


def recover_interrupted(study: optuna.Study) -> int:
    """Fail trials left RUNNING by a killed process and enqueue their parameters again. Returns the count."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_user_attr(t._trial_id, "failure", "interrupted: process stopped mid-trial")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        if t.params:
            study.enqueue_trial(dict(t.params), skip_if_exists=False)
        n += 1
    return n


# -- budget ----------------------------------------------------------------------------------------------


def _trial_restarts(study: optuna.Study) -> list[dict[str, Any]]:
    return [r for t in study.get_trials(deepcopy=False) for r in t.user_attrs.get("restarts", [])]


def _verify_restarts(study: optuna.Study) -> list[dict[str, Any]]:
    progress = study.user_attrs.get("verify_progress", {})
    return [r for rs in progress.values() for r in rs]


def budget_used(study: optuna.Study) -> tuple[int, float]:
    """Engine starts and engine wall minutes spent so far (search and verification)."""
    runs = _trial_restarts(study) + _verify_restarts(study)
    return len(runs), sum(float(r.get("wall_s") or 0.0) for r in runs) / 60.0


def _search_may_start(study: optuna.Study, options: StudyOptions, extra: int) -> bool:
    """Whether ``extra`` more search restarts fit the budget with verification's share held back."""
    used, minutes = budget_used(study)
    reserve = options.verify_reserve
    if options.budget_restarts is not None and used + extra + reserve > options.budget_restarts:
        return False
    if options.budget_minutes is not None:
        per_restart = minutes / used if used else 0.0
        if minutes + (extra + reserve) * per_restart > options.budget_minutes:
            return False
    return True


# -- the search ------------------------------------------------------------------------------------------


def _finished_search_trials(study: optuna.Study) -> int:
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=done)
               if not t.user_attrs.get("interrupted") and "infeasible" not in t.user_attrs)


def _find_duplicate(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    for t in study.get_trials(deepcopy=False, states=done):
        if (t.number != number and t.user_attrs.get("config_key") == key and not t.user_attrs.get("interrupted")
                and "duplicate_of" not in t.user_attrs):
            return t
    return None


def _tell_duplicate(study: optuna.Study, trial: optuna.Trial, original: FrozenTrial) -> None:
    trial.set_user_attr("duplicate_of", original.number)
    if original.user_attrs.get("failure"):
        trial.set_user_attr("failure", f"same configuration as trial {original.number}: "
                                       f"{original.user_attrs['failure']}")
    if original.state == TrialState.COMPLETE:
        study.tell(trial, original.value)
    else:
        study.tell(trial, state=original.state)


def _measure_trial(ctx: StudyContext, trial: optuna.Trial, config: EngineConfig,
                   observers: Sequence[StudyObserver]) -> TrialRecord:
    """Run restarts of ``config`` until racing says stop; record every restart on the trial as it lands."""
    options, study = ctx.options, ctx.study
    policy = options.policy
    restarts: list[RestartResult] = []
    values: list[float] = []

    def on_result(result: RestartResult) -> None:
        restarts.append(result)
        trial.set_user_attr("restarts", [r.to_dict() for r in restarts])
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
        if not _search_may_start(study, options, 1):
            break  # budget: keep what we have
    summary = summarize(config, restarts, options.confidence, options.interval_method)
    trial.set_user_attr("summary", summary.to_dict())
    trial.set_user_attr("resolved_differs", summary.resolved_differs)
    if summary.differences:
        trial.set_user_attr("differences", list(summary.differences))
    if reason:
        trial.set_user_attr("failure" if state == TrialState.FAIL else "pruned_reason", reason)
    if state == TrialState.COMPLETE:
        study.tell(trial, summary.mean)
    else:
        study.tell(trial, state=state)
    return TrialRecord(trial.number, state.name, config, tuple(restarts), summary,
                       reason if state == TrialState.FAIL else None)


def _search(ctx: StudyContext, observers: Sequence[StudyObserver]) -> None:
    study, options = ctx.study, ctx.options
    idle = 0
    while _finished_search_trials(study) < options.trials:
        if idle >= MAX_IDLE_SUGGESTIONS:
            study.set_user_attr("search_stopped", f"{idle} suggestions in a row were repeats or infeasible: "
                                                  "the sampler has converged on what it measured")
            break
        if not _search_may_start(study, options, options.policy.min_restarts):
            break
        trial = study.ask()
        try:
            config = ctx.space.suggest(trial)
        except Infeasible as exc:
            trial.set_user_attr("infeasible", str(exc))
            study.tell(trial, state=TrialState.PRUNED)
            idle += 1
            continue
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("config_key", config.key())
        trial.set_user_attr("label", config.label())
        duplicate = _find_duplicate(study, config.key(), trial.number)
        if duplicate is not None:
            _tell_duplicate(study, trial, duplicate)
            idle += 1
            continue
        idle = 0
        notify(observers, "on_trial_start", ctx, trial.number, config)
        try:
            record = _measure_trial(ctx, trial, config, observers)
        except KeyboardInterrupt:
            _abandon(study, trial)
            raise
        notify(observers, "on_trial_end", ctx, record)


def _abandon(study: optuna.Study, trial: optuna.Trial) -> None:
    """Ctrl-C mid-trial: fail it as interrupted and queue its parameters to run again on resume."""
    trial.set_user_attr("interrupted", True)
    trial.set_user_attr("failure", "interrupted by user (Ctrl-C)")
    study.tell(trial, state=TrialState.FAIL)
    study.enqueue_trial(dict(trial.params), skip_if_exists=False)


# -- verification ----------------------------------------------------------------------------------------


def select_candidates(study: optuna.Study, space: SearchSpace, top_k: int) -> list[Candidate]:
    """Up to top-k engine plans by shrunk search estimate, then the baseline (see :func:`select_verified`)."""
    evidence = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        attrs = t.user_attrs
        if "config" not in attrs or "duplicate_of" in attrs or attrs.get("summary") is None:
            continue
        summary = TrialSummary.from_dict(attrs["summary"])
        if summary.values:
            evidence.append(SearchEvidence.from_summary(t.number, EngineConfig.from_dict(attrs["config"]), summary))
    return select_verified(evidence, space.baseline(), top_k)


def _verify_may_start(study: optuna.Study, options: StudyOptions, extra: int) -> bool:
    """Whether ``extra`` more verification starts fit the whole study's budget."""
    used, minutes = budget_used(study)
    if options.budget_restarts is not None and used + extra > options.budget_restarts:
        return False
    if options.budget_minutes is not None and used and minutes + extra * minutes / used > options.budget_minutes:
        return False
    return True


def _verify(ctx: StudyContext, observers: Sequence[StudyObserver]) -> Verification:
    study, options = ctx.study, ctx.options
    stored = study.user_attrs.get("verify_candidates")
    if stored is None:
        candidates = select_candidates(study, ctx.space, options.verify_top_k)
        study.set_user_attr("verify_candidates", [c.to_dict() for c in candidates])
    else:
        candidates = [Candidate.from_dict(c) for c in stored]

    def on_result(cand: Candidate, result: RestartResult) -> None:
        notify(observers, "on_restart", ctx, "verify", f"verify {cand.config.label()}", result)

    verification = run_verification(
        ctx.engine, ctx.space.workload, candidates, options.verify_restarts, options.verify_seed,
        done=study.user_attrs.get("verify_progress", {}),
        on_result=on_result,
        save_progress=lambda progress: study.set_user_attr("verify_progress", progress),
        confidence=options.confidence, interval_method=options.interval_method,
        max_restarts=options.verify_max_restarts, may_start=lambda n: _verify_may_start(study, options, n),
    )
    study.set_user_attr("verification", verification.to_dict())
    notify(observers, "on_verification_end", ctx, verification)
    return verification


# -- the whole study -------------------------------------------------------------------------------------


def _record_metadata(ctx: StudyContext) -> None:
    options, study = ctx.options, ctx.study
    _, why = make_sampler(options.sampler, options.seed)
    meta = {
        "space_name": ctx.space.name,
        "space_file": ctx.space.source,
        "engine": dict(ctx.engine_info),
        "model": ctx.space.engine_args.get("model"),
        "workload": ctx.space.workload.to_dict(),
        "sampler": options.sampler,
        "sampler_why": why,
        "racing": dataclasses.asdict(options.policy),
        "top_k": options.verify_top_k,
        "verify_restarts": options.verify_restarts,
        "verify_max_restarts": options.verify_max_restarts,
        "budget_restarts": options.budget_restarts,
        "budget_minutes": options.budget_minutes,
        "trials": options.trials,
        "seed": options.seed,
        "command": list(options.command),
        "baseline": ctx.space.baseline().to_dict(),
    }
    if "meta" not in study.user_attrs:
        study.set_user_attr("meta", meta)
    study.set_user_attr("space_yaml", Path(ctx.space.source).read_text() if os.path.exists(ctx.space.source)
                        else json.dumps(dict(ctx.space.raw)))


def run_study(space: SearchSpace, engine: EngineBackend, options: StudyOptions,
              observers: Sequence[StudyObserver] = ()) -> optuna.Study:
    """Run (or resume) a whole study: baselines, search, verification. Returns the Optuna study.

    Raises:
        Interrupted: Ctrl-C; everything finished so far is stored and the same command resumes.
    """
    study, resumed = open_study(options)
    cache_dir = os.path.join(options.workdir, options.study_name)
    if options.fresh:
        # Starting over means cold caches too: a study-local compile cache left by the deleted study would make
        # its first starts look warm.
        shutil.rmtree(cache_dir, ignore_errors=True)
    os.makedirs(cache_dir, exist_ok=True)
    engine.cache_dir = engine.cache_dir or cache_dir
    ctx = StudyContext(options, space, engine, engine.describe(), study, cache_dir, resumed)
    recover_interrupted(study)
    if not study.user_attrs.get("baselines_enqueued"):
        for params in [*space.baseline_params(), *options.enqueue]:
            study.enqueue_trial(dict(params))
        study.set_user_attr("baselines_enqueued", True)
    _record_metadata(ctx)
    notify(observers, "on_study_start", ctx)
    try:
        _search(ctx, observers)
        if options.verify and "verification" not in study.user_attrs:
            _verify(ctx, observers)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; finished work is saved in {options.storage} - run the same command "
                          "again to resume") from None
    from autotune.report import build_report

    notify(observers, "on_study_end", ctx, build_report(study))
    return study
