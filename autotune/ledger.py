"""The ledger: what a study stores in Optuna, and the only module that knows how.

A study's record is Optuna's storage (SQLite under ``mlruns/`` by default). Everything autotune adds to it is
a user attribute of the study or of a trial, under one namespaced key per fact; each key is a constant below
with one owner (this module), like Optuna's own ``_CONSTRAINTS_KEY = "tpe:constraints"``. Other modules call
the writers and readers here and never name a key.

Every value is redacted on its way in (:mod:`autotune.redact`): configurations are stored with their credentials
replaced, so a configuration read back is for reports, never for running an engine; the study rebuilds runnable
configurations from the space and the trial's parameters.

Schema versions:

* ``0``: studies written before this module existed: the same facts under bare keys (``config``, ``meta``)
  and no version attribute. They still open and resume; what is written to them keeps the bare keys, so one
  study never mixes two schemas.
* ``1``: keys namespaced ``autotune:<name>``; the version is stored in the study under :data:`_SCHEMA_KEY`.

A study written by a newer autotune (a higher version) is refused with one line naming both versions.

Adding a key: one constant here (``_FINGERPRINT_KEY = "autotune:fingerprint"``), a writer and a reader on
:class:`Ledger`. Old studies simply do not have it; a reader returns its default.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.fingerprint import Fingerprint
from autotune.measure import TrialSummary
from autotune.records import EngineConfig, EngineFacts, RestartResult
from autotune.redact import redact
from autotune.verify import Candidate, Verification

__all__ = [
    "DEFAULT_STORAGE",
    "DEFAULT_STORE_DIR",
    "SCHEMA_VERSION",
    "Ledger",
    "LedgerError",
    "StudyMeta",
    "TrialRecord",
    "create_or_load",
    "ensure_sqlite_dir",
    "latest_study_name",
    "load",
    "make_storage",
    "study_names",
]

DEFAULT_STORE_DIR = "mlruns"
DEFAULT_STORAGE = f"sqlite:///{DEFAULT_STORE_DIR}/optuna.db"

#: The schema this code writes. Bump it when a stored shape changes incompatibly, and keep reading the old one.
SCHEMA_VERSION = 1
_NAMESPACE = "autotune:"

# -- study user attributes -------------------------------------------------------------------------------
_SCHEMA_KEY = "autotune:schema_version"
#: The study's metadata (:class:`StudyMeta`), written once when the study starts.
_META_KEY = "autotune:meta"
#: The search space file's text, as the study first ran it.
_SPACE_YAML_KEY = "autotune:space_yaml"
#: The baselines and ``--enqueue`` configurations are queued once per study.
_BASELINES_ENQUEUED_KEY = "autotune:baselines_enqueued"
#: Why the search stopped before its trial count (space exhausted), if it did.
_SEARCH_STOPPED_KEY = "autotune:search_stopped"
#: The configurations chosen for verification, fixed once chosen so a resume verifies the same ones.
_VERIFY_CANDIDATES_KEY = "autotune:verify_candidates"
#: Verification restarts run so far: config key -> list of restart dicts, saved after every restart.
_VERIFY_PROGRESS_KEY = "autotune:verify_progress"
#: The finished verification (:class:`~autotune.verify.Verification`).
_VERIFICATION_KEY = "autotune:verification"
#: What the study measures (:class:`~autotune.fingerprint.Fingerprint`): a resume must measure the same thing.
_FINGERPRINT_KEY = "autotune:fingerprint"
#: The MLflow parent run of the study, so a resumed study continues the same run.
_MLFLOW_PARENT_RUN_KEY = "autotune:mlflow_parent_run_id"

# -- trial user attributes -------------------------------------------------------------------------------
#: The configuration the trial ran (:class:`~autotune.records.EngineConfig`).
_CONFIG_KEY = "autotune:config"
#: :meth:`EngineConfig.key`, for finding repeats of a configuration.
_CONFIG_ID_KEY = "autotune:config_key"
_LABEL_KEY = "autotune:label"
#: Every restart of the trial (cold and failed ones included), saved as each one lands.
_RESTARTS_KEY = "autotune:restarts"
#: The trial's :class:`~autotune.measure.TrialSummary`.
_SUMMARY_KEY = "autotune:summary"
_RESOLVED_DIFFERS_KEY = "autotune:resolved_differs"
_DIFFERENCES_KEY = "autotune:differences"
#: One-line reason a trial failed.
_FAILURE_KEY = "autotune:failure"
#: One-line reason a trial was raced out.
_PRUNED_REASON_KEY = "autotune:pruned_reason"
#: The trial was cut short (Ctrl-C, SIGTERM, kill -9) and its parameters queued again.
_INTERRUPTED_KEY = "autotune:interrupted"
#: The sampler suggested a configuration the space rules out; nothing ran.
_INFEASIBLE_KEY = "autotune:infeasible"
#: The trial repeated an earlier trial's configuration; it was told that trial's result and ran nothing.
_DUPLICATE_OF_KEY = "autotune:duplicate_of"

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class LedgerError(Exception):
    """A study that cannot be opened (unknown name, a schema this autotune does not read): one line, the fix."""


# -- storage ---------------------------------------------------------------------------------------------


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


def study_names(storage: str | optuna.storages.BaseStorage) -> list[str]:
    """Names of the studies in ``storage``, oldest first."""
    if isinstance(storage, str):
        ensure_sqlite_dir(storage)
    summaries = optuna.get_all_study_summaries(storage)
    summaries.sort(key=lambda s: s.datetime_start.timestamp() if s.datetime_start else 0.0)
    return [s.study_name for s in summaries]


def latest_study_name(storage: str) -> str:
    """The most recently started study in ``storage``.

    Raises:
        LedgerError: the store holds no study.
    """
    names = study_names(storage)
    if not names:
        raise LedgerError(f"no studies in {storage}: run `make demo` or `autotune tune` first")
    return names[-1]


def create_or_load(study_name: str, storage: str, *, sampler: optuna.samplers.BaseSampler,
                   pruner: optuna.pruners.BasePruner, fresh: bool = False) -> tuple[Ledger, bool]:
    """Open the study for running: create it (stamped with :data:`SCHEMA_VERSION`) or load it to resume.

    Args:
        fresh: Delete an existing study of that name first.

    Returns:
        ``(ledger, resumed)``.

    Raises:
        LedgerError: the existing study has a schema this autotune does not read.
    """
    store = make_storage(storage)
    names = set(study_names(store))
    if fresh and study_name in names:
        optuna.delete_study(study_name=study_name, storage=store)
        names.discard(study_name)
    resumed = study_name in names
    study = optuna.create_study(study_name=study_name, storage=store, sampler=sampler, pruner=pruner,
                                direction="maximize", load_if_exists=True)
    return Ledger(study, create=True), resumed


def load(study_name: str, storage: str = DEFAULT_STORAGE) -> Ledger:
    """Open an existing study to read it (reports, export, tracking).

    Raises:
        LedgerError: no such study (the message lists the studies there are), or an unreadable schema.
    """
    names = study_names(storage)
    if study_name not in names:
        have = ", ".join(sorted(names)) if names else "none"
        raise LedgerError(f"no study named {study_name!r} in {storage} (studies there: {have})")
    return Ledger(optuna.load_study(study_name=study_name, storage=storage))


# -- records ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StudyMeta:
    """What a study records once about itself: space, engine, model, workload, search settings, command."""

    space_name: str | None = None
    space_file: str | None = None
    engine: EngineFacts = dataclasses.field(default_factory=EngineFacts)
    model: str | None = None
    workload: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    sampler: str | None = None
    sampler_why: str | None = None
    racing: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    top_k: int | None = None
    verify_restarts: int | None = None
    verify_max_restarts: int | None = None
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    trials: int | None = None
    seed: int | None = None
    command: tuple[str, ...] = ()
    baseline: EngineConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["engine"] = self.engine.to_dict()
        out["workload"] = dict(self.workload)
        out["racing"] = dict(self.racing)
        out["command"] = list(self.command)
        out["baseline"] = None if self.baseline is None else self.baseline.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> StudyMeta:
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["engine"] = EngineFacts.from_dict(data.get("engine"))
        kw["workload"] = dict(data.get("workload") or {})
        kw["racing"] = dict(data.get("racing") or {})
        kw["command"] = tuple(data.get("command") or ())
        kw["baseline"] = None if not data.get("baseline") else EngineConfig.from_dict(data["baseline"])
        return cls(**kw)


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One search trial that ran (or was told a repeat's result), as observers and reports see it.

    Attributes:
        number: Optuna's trial number.
        state: ``COMPLETE``, ``PRUNED``, ``FAIL`` (or ``RUNNING`` for the trial in progress).
        config: The configuration.
        restarts: Every restart, in order.
        summary: The trial's summary, once it finished.
        reason: Why it failed (or was infeasible).
        duplicate_of: The earlier trial it repeated, if it did.
        value: The value Optuna was told (the mean over counted restarts) when complete.
        interrupted: Cut short by an interruption; its parameters were queued again.
    """

    number: int
    state: str
    config: EngineConfig
    restarts: tuple[RestartResult, ...]
    summary: TrialSummary | None
    reason: str | None = None
    duplicate_of: int | None = None
    value: float | None = None
    interrupted: bool = False


def _bare(key: str) -> str:
    return key[len(_NAMESPACE):] if key.startswith(_NAMESPACE) else key


class Ledger:
    """One study's record: typed writers and readers over its Optuna user attributes.

    Args:
        study: The Optuna study.
        create: The caller may run the study: an unversioned study with no autotune data yet is stamped
            with :data:`SCHEMA_VERSION`.

    Raises:
        LedgerError: the study's schema is newer than this autotune reads.
    """

    def __init__(self, study: optuna.Study, create: bool = False) -> None:
        self.study = study
        self.version = self._detect_version(create)

    @property
    def name(self) -> str:
        return self.study.study_name

    def _detect_version(self, create: bool) -> int:
        attrs = self.study.user_attrs
        stored = attrs.get(_SCHEMA_KEY)
        if stored is not None:
            version = int(stored)
            if version > SCHEMA_VERSION:
                raise LedgerError(f"study {self.name!r} was written with ledger schema version {version}; this "
                                  f"autotune reads versions 0 to {SCHEMA_VERSION}: upgrade autotune to open it")
            return version
        has_data = bool(attrs) or any(t.user_attrs for t in self.study.get_trials(deepcopy=False))
        if has_data:
            return 0  # written before the schema was versioned: bare keys
        if create:
            self.study.set_user_attr(_SCHEMA_KEY, SCHEMA_VERSION)
        return SCHEMA_VERSION

    def _key(self, key: str) -> str:
        """The stored name of ``key`` in this study's schema."""
        return key if self.version >= 1 else _bare(key)

    # -- low level ---------------------------------------------------------------------------------------

    def _get(self, attrs: Mapping[str, Any], key: str, default: Any = None) -> Any:
        return attrs.get(self._key(key), default)

    def _has(self, attrs: Mapping[str, Any], key: str) -> bool:
        return self._key(key) in attrs

    def _set_study(self, key: str, value: Any) -> None:
        # Every value goes through redaction on its way in: a credential the engine needs never reaches the store.
        self.study.set_user_attr(self._key(key), redact(value))

    def _set_trial(self, trial: optuna.Trial, key: str, value: Any) -> None:
        trial.set_user_attr(self._key(key), redact(value))

    def _study_attr(self, key: str, default: Any = None) -> Any:
        return self._get(self.study.user_attrs, key, default)

    # -- trial writers (on the live optuna.Trial) --------------------------------------------------------

    def record_config(self, trial: optuna.Trial, config: EngineConfig) -> None:
        self._set_trial(trial, _CONFIG_KEY, config.to_dict())
        self._set_trial(trial, _CONFIG_ID_KEY, config.key())
        self._set_trial(trial, _LABEL_KEY, config.label())

    def record_restarts(self, trial: optuna.Trial, restarts: Sequence[RestartResult]) -> None:
        self._set_trial(trial, _RESTARTS_KEY, [r.to_dict() for r in restarts])

    def record_summary(self, trial: optuna.Trial, summary: TrialSummary) -> None:
        self._set_trial(trial, _SUMMARY_KEY, summary.to_dict())
        self._set_trial(trial, _RESOLVED_DIFFERS_KEY, summary.resolved_differs)
        if summary.differences:
            self._set_trial(trial, _DIFFERENCES_KEY, list(summary.differences))

    def record_failure(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _FAILURE_KEY, reason)

    def record_pruned(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _PRUNED_REASON_KEY, reason)

    def record_infeasible(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _INFEASIBLE_KEY, reason)

    def record_duplicate(self, trial: optuna.Trial, original: FrozenTrial) -> None:
        """``trial`` repeats ``original``: point at it, and carry its failure reason."""
        self._set_trial(trial, _DUPLICATE_OF_KEY, original.number)
        failure = self.failure(original)
        if failure:
            self.record_failure(trial, f"same configuration as trial {original.number}: {failure}")

    def record_interrupted(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _INTERRUPTED_KEY, True)
        self._set_trial(trial, _FAILURE_KEY, reason)

    def recover_interrupted(self) -> int:
        """Fail trials left RUNNING by a killed process and enqueue their parameters again. Returns the count."""
        study, n = self.study, 0
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study._storage.set_trial_user_attr(t._trial_id, self._key(_INTERRUPTED_KEY), True)
            study._storage.set_trial_user_attr(t._trial_id, self._key(_FAILURE_KEY),
                                               "interrupted: process stopped mid-trial")
            study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            if t.params:
                study.enqueue_trial(dict(t.params), skip_if_exists=False)
            n += 1
        return n

    # -- trial readers -----------------------------------------------------------------------------------

    def has_config(self, trial: FrozenTrial) -> bool:
        return self._has(trial.user_attrs, _CONFIG_KEY)

    def config(self, trial: FrozenTrial) -> EngineConfig | None:
        data = self._get(trial.user_attrs, _CONFIG_KEY)
        return None if data is None else EngineConfig.from_dict(data)

    def config_key(self, trial: FrozenTrial) -> str | None:
        return self._get(trial.user_attrs, _CONFIG_ID_KEY)

    def label(self, trial: FrozenTrial) -> str | None:
        return self._get(trial.user_attrs, _LABEL_KEY)

    def restarts(self, trial: FrozenTrial) -> tuple[RestartResult, ...]:
        return tuple(RestartResult.from_dict(r) for r in self._get(trial.user_attrs, _RESTARTS_KEY, []))

    def summary(self, trial: FrozenTrial) -> TrialSummary | None:
        data = self._get(trial.user_attrs, _SUMMARY_KEY)
        return None if data is None else TrialSummary.from_dict(data)

    def failure(self, trial: FrozenTrial) -> str | None:
        return self._get(trial.user_attrs, _FAILURE_KEY)

    def pruned_reason(self, trial: FrozenTrial) -> str | None:
        return self._get(trial.user_attrs, _PRUNED_REASON_KEY)

    def infeasible(self, trial: FrozenTrial) -> str | None:
        return self._get(trial.user_attrs, _INFEASIBLE_KEY)

    def is_infeasible(self, trial: FrozenTrial) -> bool:
        return self._has(trial.user_attrs, _INFEASIBLE_KEY)

    def duplicate_of(self, trial: FrozenTrial) -> int | None:
        return self._get(trial.user_attrs, _DUPLICATE_OF_KEY)

    def is_duplicate(self, trial: FrozenTrial) -> bool:
        return self._has(trial.user_attrs, _DUPLICATE_OF_KEY)

    def interrupted(self, trial: FrozenTrial) -> bool:
        return bool(self._get(trial.user_attrs, _INTERRUPTED_KEY))

    def trial_record(self, trial: FrozenTrial) -> TrialRecord | None:
        """The trial as a :class:`TrialRecord`; ``None`` when it never got a configuration (infeasible)."""
        config = self.config(trial)
        if config is None:
            return None
        return TrialRecord(
            number=trial.number,
            state=trial.state.name,
            config=config,
            restarts=self.restarts(trial),
            summary=self.summary(trial),
            reason=self.failure(trial) or self.infeasible(trial),
            duplicate_of=self.duplicate_of(trial),
            value=trial.value,
            interrupted=self.interrupted(trial),
        )

    def trial_records(self) -> list[TrialRecord]:
        """Every trial that got a configuration, in trial order."""
        return [r for r in (self.trial_record(t) for t in self.study.get_trials(deepcopy=False)) if r is not None]

    def mode_without_speculation(self, config: EngineConfig) -> str | None:
        """The capture mode the engine resolved for ``config``'s default mode *without* speculation.

        From the measured trial with the same compilation settings and speculation off, else from any measured
        default-mode trial without speculation (the baseline); ``None`` when none was measured.
        """
        exact = fallback = None
        for r in self.trial_records():
            s = r.summary
            if r.config.num_speculative_tokens or r.config.cudagraph_mode is not None or s is None:
                continue
            if s.resolved_mode is None:
                continue
            if dict(r.config.compilation_config) == dict(config.compilation_config):
                exact = exact or s.resolved_mode
            fallback = fallback or s.resolved_mode
        return exact or fallback

    def finished_search_trials(self) -> int:
        """Trials that count towards ``--trials``: finished, not interrupted, not infeasible."""
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=_FINISHED)
                   if not self.interrupted(t) and not self.is_infeasible(t))

    def find_duplicate(self, key: str, number: int) -> FrozenTrial | None:
        """A finished, measured (not itself a repeat) trial of the configuration ``key``, other than ``number``."""
        for t in self.study.get_trials(deepcopy=False, states=_FINISHED):
            if (t.number != number and self.config_key(t) == key and not self.interrupted(t)
                    and not self.is_duplicate(t)):
                return t
        return None

    def measured_complete(self) -> list[FrozenTrial]:
        """Complete trials that measured their own configuration (no repeats), with a value."""
        return [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if self.has_config(t) and not self.is_duplicate(t) and t.value is not None
                and not math.isnan(t.value)]

    # -- study writers and readers -----------------------------------------------------------------------

    def meta(self) -> StudyMeta:
        return StudyMeta.from_dict(self._study_attr(_META_KEY))

    def has_meta(self) -> bool:
        return self._has(self.study.user_attrs, _META_KEY)

    def record_meta(self, meta: StudyMeta) -> None:
        """The study's metadata, once: a resume keeps what the study started with."""
        if not self.has_meta():
            self._set_study(_META_KEY, meta.to_dict())

    def space_yaml(self) -> str | None:
        return self._study_attr(_SPACE_YAML_KEY)

    def record_space_yaml(self, text: str) -> None:
        self._set_study(_SPACE_YAML_KEY, text)

    def baselines_enqueued(self) -> bool:
        return bool(self._study_attr(_BASELINES_ENQUEUED_KEY))

    def record_baselines_enqueued(self) -> None:
        self._set_study(_BASELINES_ENQUEUED_KEY, True)

    def search_stopped(self) -> str | None:
        return self._study_attr(_SEARCH_STOPPED_KEY)

    def record_search_stopped(self, reason: str) -> None:
        self._set_study(_SEARCH_STOPPED_KEY, reason)

    def verify_candidates(self) -> list[Candidate] | None:
        stored = self._study_attr(_VERIFY_CANDIDATES_KEY)
        return None if stored is None else [Candidate.from_dict(c) for c in stored]

    def record_verify_candidates(self, candidates: Sequence[Candidate]) -> None:
        self._set_study(_VERIFY_CANDIDATES_KEY, [c.to_dict() for c in candidates])

    def verify_progress(self) -> dict[str, list[dict[str, Any]]]:
        """Verification restarts run so far: config key -> restart dicts (the shape ``run_verification`` takes)."""
        return {k: list(v) for k, v in (self._study_attr(_VERIFY_PROGRESS_KEY) or {}).items()}

    def record_verify_progress(self, progress: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self._set_study(_VERIFY_PROGRESS_KEY, {k: list(v) for k, v in progress.items()})

    def verification(self) -> Verification | None:
        raw = self._study_attr(_VERIFICATION_KEY)
        return None if raw is None else Verification.from_dict(raw)

    def has_verification(self) -> bool:
        return self._has(self.study.user_attrs, _VERIFICATION_KEY)

    def record_verification(self, verification: Verification) -> None:
        self._set_study(_VERIFICATION_KEY, verification.to_dict())

    def fingerprint(self) -> Fingerprint | None:
        data = self._study_attr(_FINGERPRINT_KEY)
        return None if data is None else Fingerprint.from_dict(data)

    def record_fingerprint(self, fingerprint: Fingerprint) -> None:
        self._set_study(_FINGERPRINT_KEY, fingerprint.to_dict())

    def mlflow_parent_run_id(self) -> str | None:
        return self._study_attr(_MLFLOW_PARENT_RUN_KEY)

    def record_mlflow_parent_run_id(self, run_id: str) -> None:
        self._set_study(_MLFLOW_PARENT_RUN_KEY, run_id)

    # -- budget ------------------------------------------------------------------------------------------

    def budget_used(self) -> tuple[int, float]:
        """Engine starts and engine wall minutes spent so far (search and verification)."""
        search = [r for t in self.study.get_trials(deepcopy=False)
                  for r in self._get(t.user_attrs, _RESTARTS_KEY, [])]
        verify = [r for rs in self.verify_progress().values() for r in rs]
        runs = search + verify
        return len(runs), sum(float(r.get("wall_s") or 0.0) for r in runs) / 60.0
