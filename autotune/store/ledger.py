"""The ledger: what a study stores in Optuna, and the only module that knows how.

A study's record is Optuna's storage (SQLite under ``mlruns/`` by default). Everything autotune adds to it is
a user attribute of the study or of a trial, under one namespaced key per fact; each key is a constant in
:mod:`autotune.store._keys`, and this module is the only one that reads or writes them. Other modules call the
writers and readers here and never name a key.

The store package's other modules (``_storage``, ``_meta``, ``_trials``, ``_owners``) hold one concept each; their
public names are importable from here, as they always were. The workers' records (owner, planned starts, stale
failures, the shared budget) and the verification's are mixins of :class:`Ledger` (``_worker_records``,
``_verification_records``), kept apart so this module stays a readable size.

Every value is redacted on its way in (:mod:`autotune.core.redact`): configurations are stored with their credentials
replaced, so a configuration read back is for reports, never for running an engine; the study rebuilds runnable
configurations from the space and the trial's parameters.

Schema versions:

* ``0``: studies written before this module existed: the same facts under bare keys (``config``, ``meta``)
  and no version attribute. They still open and resume; what is written to them keeps the bare keys, so one
  study never mixes two schemas.
* ``1``: keys namespaced ``autotune:<name>``; the version is stored in the study under :data:`_SCHEMA_KEY`.

A study written by a newer autotune (a higher version) is refused with one line naming both versions. Adding a key:
see :mod:`autotune.store._keys`.
"""

from __future__ import annotations

import math
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from autotune.records import decode, decoder, encode
from autotune.core.records import EngineConfig, RestartResult
from autotune.core.urls import StorageUrl
from autotune.core.redact import redact
from autotune.decisions.outputs import CONSTRAINT as _OUTPUT_CONSTRAINT
from autotune.decisions.outputs import OutputCheck, constraint_value
from autotune.decisions.floor import FLOOR_CONSTRAINT
from autotune.stats.coldstart import ColdVerdict
from autotune.stats.intervals import TrialSummary
from autotune.stats.latency import LatencyStat, SloCheck, constraint_values
from autotune.store._keys import (  # noqa: F401 - the key constants are importable from here
    _BASELINES_ENQUEUED_KEY, _COLD_STARTS_KEY, _CONFIG_ID_KEY, _CONFIG_KEY, _DIFFERENCES_KEY, _DUPLICATE_OF_KEY,
    _FAILURE_KEY, _FINGERPRINT_KEY, _INFEASIBLE_KEY, _INTERRUPTED_KEY, _LABEL_KEY, _LATENCY_KEY, _META_KEY,
    _MLFLOW_PARENT_RUN_KEY, _OWNER_KEY, _PLANNED_STARTS_KEY, _PRUNED_REASON_KEY, _RECHECKS_KEY, _RESOLVED_DIFFERS_KEY,
    _RESTARTS_KEY, _SCHEMA_KEY, _SEARCH_CLOSED_KEY, _SEARCH_END_KEY, _SEARCH_STOPPED_KEY, _SLO_CHECKS_KEY, _SPACE_YAML_KEY,
    _STUDY_UID_KEY, _SUMMARY_KEY, _VERIFICATION_KEY, _VERIFY_CANDIDATES_KEY, _VERIFY_PROGRESS_KEY,
    _VERIFY_ROUND_JOB, _VERIFY_SEQUENTIAL_KEY, CLAIM_JOB_KEY, CLAIM_OWNER_KEY, CLAIM_RESTARTS_KEY, CLAIMS_SUFFIX, FINISH_JOB,
    MLFLOW_PARENT_JOB, SCHEMA_VERSION, VERIFY_CONCLUDE_JOB, VERIFY_REDO_JOB, bare as _bare,
)
from autotune.store._meta import StudyMeta
from autotune.store._stored import decoded, flag, list_of, mapping, mapping_of, text, whole
from autotune.store._verification_records import VerificationRecords
from autotune.store._worker_records import WorkerRecords
from autotune.store.search_end import SearchEnd
from autotune.store._owners import owner_id, pid_dead as _pid_dead
from autotune.store._storage import (  # noqa: F401 - _serialize_sqlite: tests name it here
    DEFAULT_HEARTBEAT_S, DEFAULT_STORAGE, DEFAULT_STORE_DIR, DEFAULT_WORKDIR, GRACE_FACTOR, MAX_RETRIES,
    SQLITE_BUSY_TIMEOUT_S, LedgerError, _serialize_sqlite, check_optuna_schema, creation_race, ensure_sqlite_dir,
    existing_storage, latest_study_name, make_storage, study_names,
)
from autotune.store._trials import TrialRecord, over_floor, trial_failed
from autotune.store.fingerprint import Fingerprint

__all__ = [
    "CLAIMS_SUFFIX", "CLAIM_JOB_KEY", "CLAIM_OWNER_KEY", "CLAIM_RESTARTS_KEY", "DEFAULT_HEARTBEAT_S",
    "DEFAULT_STORAGE", "DEFAULT_STORE_DIR", "DEFAULT_WORKDIR", "FINISH_JOB", "GRACE_FACTOR", "MAX_RETRIES",
    "MLFLOW_PARENT_JOB", "SCHEMA_VERSION", "SQLITE_BUSY_TIMEOUT_S", "VERIFY_CONCLUDE_JOB", "VERIFY_REDO_JOB", "Ledger", "LedgerError",
    "SearchEnd", "StudyMeta", "TrialRecord", "over_floor", "trial_failed", "create_or_load", "ensure_sqlite_dir", "latest_study_name", "load", "claim_attrs",
    "check_optuna_schema", "claim_holder_gone", "creation_race", "claim_job", "make_storage", "owner_id", "record_claim_restarts", "redact", "study_names",
]

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
#: What a claim's holder stored it ran: config key -> restart dicts (:func:`record_claim_restarts`).
_CLAIM_RESTARTS = mapping_of(list_of(mapping))


def _round_of(prefix: str) -> Any:
    def read(job: str) -> int:
        return whole(int(job[len(prefix):]))  # "verify-round-x": a ValueError, one line through decoded
    return read


# -- claims: the attributes of a claim trial (:mod:`autotune.store.claims` takes and finishes claims) -----


def claim_attrs(job: str, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The user attributes a new claim trial is created with (:mod:`autotune.store.claims`)."""
    return {CLAIM_JOB_KEY: job, CLAIM_OWNER_KEY: dict(owner)}


def claim_job(trial: FrozenTrial) -> str | None:
    """The job a claim trial is for."""
    return trial.user_attrs.get(CLAIM_JOB_KEY)


def claim_owner(trial: FrozenTrial) -> dict[str, Any] | None:
    """Who holds a claim trial (:func:`owner_id`'s record), if it says."""
    owner = trial.user_attrs.get(CLAIM_OWNER_KEY)
    return dict(owner) if isinstance(owner, Mapping) else None


def claim_holder_gone(trial: FrozenTrial) -> bool:
    """The claim's holder ran on this machine and its process no longer exists (see :func:`_pid_dead`)."""
    owner = trial.user_attrs.get(CLAIM_OWNER_KEY)
    return isinstance(owner, Mapping) and _pid_dead(owner)


def record_claim_restarts(storage: optuna.storages.BaseStorage, trial_id: int,
                          restarts: Mapping[str, Sequence[RestartResult]]) -> None:
    """What a claim's holder ran for its job so far, by config key (read back by :meth:`Ledger.verify_rounds`)."""
    storage.set_trial_user_attr(trial_id, CLAIM_RESTARTS_KEY, {k: [encode(r) for r in rs] for k, rs in restarts.items()})


# -- opening a study ---------------------------------------------------------------------------------------


def create_or_load(study_name: str, storage: str | optuna.storages.BaseStorage, *,
                   sampler: optuna.samplers.BaseSampler, pruner: optuna.pruners.BasePruner, fresh: bool = False,
                   heartbeat_s: int | None = DEFAULT_HEARTBEAT_S) -> tuple[Ledger, bool]:
    """Open the study for running: create it (stamped with :data:`SCHEMA_VERSION`) or load it to join or resume.

    Several workers may call this at once: the storage lets exactly one of them create the study (a unique
    name), and only that one gets ``resumed=False`` and queues the baselines.

    Args:
        fresh: Delete an existing study of that name (and its claims) first.

    Returns:
        ``(ledger, resumed)``.

    Raises:
        LedgerError: the existing study has a schema this autotune does not read.
    """
    store = make_storage(storage, heartbeat_s)
    names = _summaries_of_new_store(store)
    if fresh:
        for name in (study_name, study_name + CLAIMS_SUFFIX):
            if name in names:
                optuna.delete_study(study_name=name, storage=store)
    try:
        study = optuna.create_study(study_name=study_name, storage=store, sampler=sampler, pruner=pruner,
                                    direction="maximize")
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=study_name, storage=store, sampler=sampler, pruner=pruner)
        created = False
    ledger = Ledger(study, create=True)
    if created:
        ledger._set_study(_STUDY_UID_KEY, uuid.uuid4().hex)
    return ledger, not created


def _summaries_of_new_store(store: optuna.storages.BaseStorage) -> set[str]:
    """The study names in ``store``; a lost race to create a new store's tables (two commands started at once on a
    new file: the store is first opened here, issue 44) is tried again, as :func:`make_storage` does."""
    for attempt in range(3):
        try:
            return {s.study_name for s in optuna.get_all_study_summaries(store)}
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's IntegrityError and friends, told apart below
            if attempt == 2 or not creation_race(exc):
                raise
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")


def load(study_name: str, storage: str | StorageUrl = DEFAULT_STORAGE) -> Ledger:
    """Open an existing study to read it (reports, export, tracking); ``storage`` as text, or as the command line
    parsed it once (:class:`~autotune.core.urls.StorageUrl`).

    Raises:
        LedgerError: no such study (the message lists the studies there are), or an unreadable schema.
    """
    store = existing_storage(storage)
    names = study_names(store)
    if study_name not in names:
        have = ", ".join(sorted(names)) if names else "none"
        raise LedgerError(f"no study named {study_name!r} in {redact(_url_text(storage))} (studies there: {have})")
    check_stored_name(study_name, storage)
    return Ledger(optuna.load_study(study_name=study_name, storage=store))


def _url_text(storage: str | StorageUrl | optuna.storages.BaseStorage) -> str:
    # The URL as typed, for redact() to hide its password as it hides any other (StorageUrl's own str() is
    # SQLAlchemy's rendering, which a message has never shown).
    return storage.url if isinstance(storage, StorageUrl) else str(storage)


def check_stored_name(study_name: str, storage: str | StorageUrl | optuna.storages.BaseStorage) -> None:
    """A study name read from a store is checked as the ``--study`` flag is (issue 44): another tool may have stored
    any text there (``../../x``, a terminal escape), and autotune makes a directory of the name and prints it.

    Raises:
        LedgerError: the name is not one autotune takes; the message shows it escaped (``!r``).
    """
    from autotune.store.studydir import check_study_name

    problem = check_study_name(study_name)
    if problem is not None:
        raise LedgerError(f"study in {redact(_url_text(storage))}: the stored study name {problem}, which autotune "
                          "does not read (it names a directory under --workdir); copy the study under a plain name, "
                          "e.g. optuna.copy_study(from_study_name=..., to_study_name='my-study', ...)")


class Ledger(WorkerRecords, VerificationRecords):
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
            version = decoded(stored, whole, _SCHEMA_KEY, self.name, None)
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

    def _has_study(self, key: str) -> bool:
        return self._has(self.study.user_attrs, key)

    def _read(self, trial: FrozenTrial | None, key: str, parse: Any, default: Any = None) -> Any:
        """A stored value through ``parse`` (``trial`` None: the study's); one autotune never writes is one line."""
        value = self._get(self.study.user_attrs if trial is None else trial.user_attrs, key)
        return default if value is None else decoded(value, parse, self._key(key), self.name,
                                                     None if trial is None else trial.number)

    # -- trial writers (on the live optuna.Trial) --------------------------------------------------------

    def record_config(self, trial: optuna.Trial, config: EngineConfig) -> None:
        self._set_trial(trial, _CONFIG_KEY, encode(config))
        self._set_trial(trial, _CONFIG_ID_KEY, config.key())
        self._set_trial(trial, _LABEL_KEY, config.label())

    def record_restarts(self, trial: optuna.Trial, restarts: Sequence[RestartResult]) -> None:
        self._set_trial(trial, _RESTARTS_KEY, [encode(r) for r in restarts])

    def record_summary(self, trial: optuna.Trial, summary: TrialSummary) -> None:
        self._set_trial(trial, _SUMMARY_KEY, encode(summary))
        self._set_trial(trial, _RESOLVED_DIFFERS_KEY, summary.resolved_differs)
        if summary.differences:
            self._set_trial(trial, _DIFFERENCES_KEY, list(summary.differences))

    def record_failure(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _FAILURE_KEY, reason)

    def record_pruned(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _PRUNED_REASON_KEY, reason)

    def record_infeasible(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _INFEASIBLE_KEY, reason)

    def record_floor_constraint(self, trial: optuna.Trial, value: float) -> None:
        """Optuna's constraint :data:`~autotune.decisions.floor.FLOOR_CONSTRAINT` on the trial (feasible at <= 0): set once,
        on the trial whose restarts made its configuration hit the memory floor twice."""
        trial.set_constraint(FLOOR_CONSTRAINT, float(value))

    def floor_constraint(self, trial: FrozenTrial) -> float | None:
        """The trial's memory-floor constraint (``None``: never set)."""
        return trial.constraints.get(FLOOR_CONSTRAINT)

    def record_duplicate(self, trial: optuna.Trial, original: FrozenTrial) -> None:
        """``trial`` repeats ``original``: point at it, and carry its failure reason and Optuna constraints."""
        self._set_trial(trial, _DUPLICATE_OF_KEY, original.number)
        for key, value in original.constraints.items():
            # The repeat is as (in)feasible as what it repeats: the sampler must not see it as unconstrained.
            trial.set_constraint(key, value)
        failure = self.failure(original)
        if failure:
            self.record_failure(trial, f"same configuration as trial {original.number}: {failure}")

    def record_latency(self, trial: optuna.Trial, latency: Mapping[str, LatencyStat],
                       checks: Sequence[SloCheck] | None = None) -> None:
        """The trial's latency and, under limits, each limit's check and Optuna's constraint for it.

        The constraints are Optuna's own (``Trial.set_constraint``, named after the limit, feasible at <= 0): the
        samplers model feasibility from them and ``FrozenTrial.constraints`` reads them back.
        """
        if latency:
            trial.set_user_attr(self._key(_LATENCY_KEY), {k: encode(v) for k, v in latency.items()})
        if checks is not None:
            trial.set_user_attr(self._key(_SLO_CHECKS_KEY), [encode(c) for c in checks])
            for check, value in zip(checks, constraint_values(checks)):
                trial.set_constraint(check.key, value)

    def record_output_check(self, trial: optuna.Trial, check: OutputCheck) -> None:
        """The output check as Optuna's constraint (as a latency limit is): the agreement's shortfall below the
        threshold. Nothing when there is no comparison yet; the report recomputes it from the restarts."""
        value = constraint_value(check)
        if value is not None:
            trial.set_constraint(_OUTPUT_CONSTRAINT, value)

    def record_interrupted(self, trial: optuna.Trial, reason: str) -> None:
        self._set_trial(trial, _INTERRUPTED_KEY, True)
        self._set_trial(trial, _FAILURE_KEY, reason)

    # -- trial readers -----------------------------------------------------------------------------------

    def has_config(self, trial: FrozenTrial) -> bool:
        return self._has(trial.user_attrs, _CONFIG_KEY)

    def config(self, trial: FrozenTrial) -> EngineConfig | None:
        return self._read(trial, _CONFIG_KEY, decoder(EngineConfig))

    def config_key(self, trial: FrozenTrial) -> str | None:
        return self._read(trial, _CONFIG_ID_KEY, text)

    def label(self, trial: FrozenTrial) -> str | None:
        return self._read(trial, _LABEL_KEY, text)

    def restarts(self, trial: FrozenTrial) -> tuple[RestartResult, ...]:
        return tuple(self._read(trial, _RESTARTS_KEY, list_of(decoder(RestartResult)), ()))

    def summary(self, trial: FrozenTrial) -> TrialSummary | None:
        return self._read(trial, _SUMMARY_KEY, decoder(TrialSummary))

    def failure(self, trial: FrozenTrial) -> str | None:
        return self._read(trial, _FAILURE_KEY, text)

    def pruned_reason(self, trial: FrozenTrial) -> str | None:
        return self._read(trial, _PRUNED_REASON_KEY, text)

    def infeasible(self, trial: FrozenTrial) -> str | None:
        return self._read(trial, _INFEASIBLE_KEY, text)

    def is_infeasible(self, trial: FrozenTrial) -> bool:
        return self._has(trial.user_attrs, _INFEASIBLE_KEY)

    def duplicate_of(self, trial: FrozenTrial) -> int | None:
        return self._read(trial, _DUPLICATE_OF_KEY, whole)

    def is_duplicate(self, trial: FrozenTrial) -> bool:
        return self._has(trial.user_attrs, _DUPLICATE_OF_KEY)

    def interrupted(self, trial: FrozenTrial, retried: Mapping[int, int] | None = None) -> bool:
        """Cut short: by an interruption this process saw, or by a worker that stopped beating (then retried)."""
        if self._read(trial, _INTERRUPTED_KEY, flag, False):
            return True
        if trial.state != TrialState.FAIL:
            return False
        return trial.number in (self.retried() if retried is None else retried)

    def latency(self, trial: FrozenTrial) -> dict[str, LatencyStat]:
        return self._read(trial, _LATENCY_KEY, mapping_of(decoder(LatencyStat)), {})

    def slo_checks(self, trial: FrozenTrial) -> list[SloCheck]:
        return self._read(trial, _SLO_CHECKS_KEY, list_of(decoder(SloCheck)), [])


    def retried(self) -> dict[int, int]:
        """Trials failed for a stale heartbeat and queued again: number -> the number of the latest retry.

        A retry carries the restarts its predecessors measured, so theirs are counted once, on the retry.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            out: dict[int, int] = {}
            for t in sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number):
                for number in RetryHeartbeatStaleTrialCallback.retry_history(t):
                    out[number] = t.number
            return out

    def trial_record(self, trial: FrozenTrial, retried: Mapping[int, int] | None = None) -> TrialRecord | None:
        """The trial as a :class:`TrialRecord`; ``None`` when it never got a configuration (infeasible)."""
        config = self.config(trial)
        if config is None:
            return None
        retried = self.retried() if retried is None else retried
        reason = self.failure(trial) or self.infeasible(trial)
        if reason is None and trial.number in retried:
            reason = f"interrupted: its worker stopped (no heartbeat); retried as trial {retried[trial.number]}"
        return TrialRecord(
            number=trial.number,
            state=TrialState.FAIL.name if over_floor(trial) else trial.state.name,
            config=config,
            restarts=self.restarts(trial),
            summary=self.summary(trial),
            reason=reason,
            duplicate_of=self.duplicate_of(trial),
            value=trial.value,
            interrupted=self.interrupted(trial, retried),
        )

    def trial_records(self) -> list[TrialRecord]:
        """Every trial that got a configuration, in trial order."""
        retried = self.retried()
        return [r for r in (self.trial_record(t, retried) for t in self.study.get_trials(deepcopy=False))
                if r is not None]

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
        """Trials that count towards ``--trials``: finished, not interrupted, not infeasible, not a repeat."""
        retried = self.retried()
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=_FINISHED)
                   if self._counts_as_trial(t, retried))

    def _counts_as_trial(self, trial: FrozenTrial, retried: Mapping[int, int]) -> bool:
        # A repeated suggestion is answered from the record and starts no engine: counting it would let a sampler
        # that repeats itself end a study with its engine-start budget unspent (114 of 120 starts on gb10).
        return not self.interrupted(trial, retried) and not self.is_infeasible(trial) and not self.is_duplicate(trial)

    def find_duplicate(self, key: str, number: int) -> FrozenTrial | None:
        """A measured (not itself a repeat) trial of the configuration ``key``, other than ``number``: a finished
        one, or one another worker is running now (then this one is told that trial's result once it has one)."""
        return next((t for t in self._measured_trials() if t.number != number and self.config_key(t) == key), None)

    def measured_keys(self) -> set[str]:
        """Config keys of every measured trial (finished or running, not interrupted, not a repeat): the
        configurations :meth:`find_duplicate` would find, read from the storage once."""
        return {key for t in self._measured_trials() if (key := self.config_key(t)) is not None}

    def _measured_trials(self) -> Iterator[FrozenTrial]:
        retried = self.retried()
        for t in self.study.get_trials(deepcopy=False, states=(*_FINISHED, TrialState.RUNNING)):
            if not self.interrupted(t, retried) and not self.is_duplicate(t):
                yield t

    # -- claims (read side; :mod:`autotune.store.claims` takes and finishes them) ------------------------------

    @staticmethod
    def verify_round_job(rnd: int) -> str:
        return _VERIFY_ROUND_JOB.format(rnd)

    def _claims_study(self) -> optuna.Study | None:
        try:
            return optuna.load_study(study_name=self.name + CLAIMS_SUFFIX, storage=self.study._storage)
        except KeyError:
            return None

    def verify_rounds(self) -> dict[int, dict[str, list[dict[str, Any]]]]:
        """Verification restarts by round and config key, as every holder of each round's claim stored them
        (oldest holder first)."""
        claims = self._claims_study()
        if claims is None:
            return {}
        prefix = _VERIFY_ROUND_JOB.format("")
        rounds: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for t in sorted(claims.get_trials(deepcopy=False), key=lambda t: t.number):
            job = self._read_claim(t, CLAIM_JOB_KEY, text, "")
            if job.startswith(prefix):
                by_key = rounds.setdefault(self._read_claim(t, CLAIM_JOB_KEY, _round_of(prefix)), {})
                for key, runs in self._read_claim(t, CLAIM_RESTARTS_KEY, _CLAIM_RESTARTS, {}).items():
                    by_key.setdefault(key, []).extend(runs)
            elif job.startswith(VERIFY_REDO_JOB.format("")):  # a redo (issue 32): each restart in the round it ran for
                for key, rs in self._read_claim(t, CLAIM_RESTARTS_KEY, _CLAIM_RESTARTS, {}).items():
                    for run in rs:
                        rounds.setdefault(int(run.get("restart") or 0), {}).setdefault(key, []).append(run)
        return rounds

    def claim_restarts(self, job: str) -> dict[str, list[dict[str, Any]]]:
        """The restarts every holder of ``job``'s claims stored (a holder that was interrupted or killed, then the
        next), by config key, oldest holder first: what a rerun of the job continues from (a recheck's index)."""
        claims = self._claims_study()
        out: dict[str, list[dict[str, Any]]] = {}
        for t in sorted(claims.get_trials(deepcopy=False) if claims is not None else (), key=lambda t: t.number):
            if self._read_claim(t, CLAIM_JOB_KEY, text, "") == job:
                for key, runs in self._read_claim(t, CLAIM_RESTARTS_KEY, _CLAIM_RESTARTS, {}).items():
                    out.setdefault(key, []).extend(runs)
        return out

    def _read_claim(self, trial: FrozenTrial, key: str, parse: Any, default: Any = None) -> Any:
        """A claim trial's stored value through ``parse``; one autotune never writes is one line naming the claims
        study, the claim trial and the key (claims were namespaced from the start: no schema-0 names)."""
        value = trial.user_attrs.get(key)
        return default if value is None else decoded(value, parse, key, self.name + CLAIMS_SUFFIX, trial.number)

    def study_uid(self) -> str | None:
        """The id the creating process gave the study (``None`` for studies older than it)."""
        return self._read(None, _STUDY_UID_KEY, text)

    def measured_complete(self) -> list[FrozenTrial]:
        """Complete trials that measured their own configuration (no repeats), with a value."""
        return [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if self.has_config(t) and not self.is_duplicate(t) and t.value is not None
                and not math.isnan(t.value)]

    # -- study writers and readers -----------------------------------------------------------------------

    def meta(self) -> StudyMeta:
        return self._read(None, _META_KEY, decoder(StudyMeta)) or StudyMeta()

    def has_meta(self) -> bool:
        return self._has(self.study.user_attrs, _META_KEY)

    def record_meta(self, meta: StudyMeta) -> None:
        """The study's metadata, once: a resume keeps what the study started with."""
        if not self.has_meta():
            self._set_study(_META_KEY, encode(meta))

    def space_yaml(self) -> str | None:
        return self._read(None, _SPACE_YAML_KEY, text)

    def record_space_yaml(self, text: str) -> None:
        self._set_study(_SPACE_YAML_KEY, text)

    def baselines_enqueued(self) -> bool:
        return self._read(None, _BASELINES_ENQUEUED_KEY, flag, False)

    def record_baselines_enqueued(self) -> None:
        self._set_study(_BASELINES_ENQUEUED_KEY, True)

    def search_stopped(self) -> str | None:
        return self._read(None, _SEARCH_STOPPED_KEY, text)

    def record_search_stopped(self, reason: str) -> None:
        self._set_study(_SEARCH_STOPPED_KEY, reason)

    def search_end(self) -> SearchEnd | None:
        return self._read(None, _SEARCH_END_KEY, decoder(SearchEnd))

    def record_search_end(self, end: SearchEnd) -> None:
        self._set_study(_SEARCH_END_KEY, encode(end))

    def search_closed(self) -> bool:
        return self._read(None, _SEARCH_CLOSED_KEY, flag, False)

    def record_search_closed(self) -> None:
        self._set_study(_SEARCH_CLOSED_KEY, True)

    def cold_verdict(self) -> ColdVerdict:
        """The study's stored cold-start verdict (undecided when none is stored yet)."""
        return self._read(None, _COLD_STARTS_KEY, decoder(ColdVerdict)) or ColdVerdict()

    def record_cold_verdict(self, verdict: ColdVerdict) -> None:
        self._set_study(_COLD_STARTS_KEY, encode(verdict))

    def fingerprint(self) -> Fingerprint | None:
        return self._read(None, _FINGERPRINT_KEY, decoder(Fingerprint))

    def record_fingerprint(self, fingerprint: Fingerprint) -> None:
        self._set_study(_FINGERPRINT_KEY, encode(fingerprint))

    def mlflow_parent_run_id(self) -> str | None:
        return self._read(None, _MLFLOW_PARENT_RUN_KEY, text)

    def record_mlflow_parent_run_id(self, run_id: str) -> None:
        self._set_study(_MLFLOW_PARENT_RUN_KEY, run_id)

    def rechecks(self) -> list[dict[str, Any]]:
        """Every ``autotune recheck`` of the study, oldest first (``RecheckRecord`` dicts; empty for older studies):
        those stored in one list by autotune before issue 44, then each stored under its own index."""
        listed = self._read(None, _RECHECKS_KEY, list_of(mapping), [])
        prefix = self._key(_RECHECKS_KEY) + ":"
        indexed = sorted((int(name[len(prefix):]), value) for name, value in self.study.user_attrs.items()
                         if name.startswith(prefix) and name[len(prefix):].isdigit())
        return [*listed, *(decoded(value, mapping, f"{prefix}{i}", self.name, None) for i, value in indexed)]

    def record_recheck(self, record: Mapping[str, Any], index: int | None = None) -> None:
        """Store a recheck; under ``index`` (its claimed index) as a value of its own, so two rechecks that end
        together never overwrite each other's record (a read-modify-write of one list would lose one)."""
        if index is None:
            self._set_study(_RECHECKS_KEY, [*self._read(None, _RECHECKS_KEY, list_of(mapping), []), dict(record)])
            return
        self.study.set_user_attr(f"{self._key(_RECHECKS_KEY)}:{int(index)}", redact(dict(record)))

    # -- budget ------------------------------------------------------------------------------------------

    def budget_used(self) -> tuple[int, float]:
        """Engine starts and engine wall minutes spent so far (search and verification)."""
        runs = self._spent_runs()
        return len(runs), sum(float(r.get("wall_s") or 0.0) for r in runs) / 60.0

    def restarts_spent(self) -> list[RestartResult]:
        """Every engine start the study paid for, each once (search and verification): what the budget counts."""
        return [decode(RestartResult, r) for r in self._spent_runs()]

    def _spent_runs(self) -> list[dict[str, Any]]:
        retried = self.retried()  # a retry carries its predecessors' restarts: count them once, there
        search = [r for t in self.study.get_trials(deepcopy=False) if t.number not in retried
                  for r in self._read(t, _RESTARTS_KEY, list_of(mapping), [])]
        verify = [r for rs in self.verify_progress().values() for r in rs]
        verify += [r for by_key in self.verify_rounds().values() for rs in by_key.values() for r in rs]
        return search + verify
