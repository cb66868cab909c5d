"""The workers' stored records: who runs a trial, the engine starts it plans, which trials a gone worker left
(failed, waiting for a retry), and the budget the workers share (search counts, starts in flight, compile caches).

A part of :class:`~autotune.store.ledger.Ledger` (a mixin, as
:class:`~autotune.store._verification_records.VerificationRecords` is): the ledger is still the one class that reads
and writes stored keys, through its low-level ``_get``/``_has``/``_read``; kept apart so the ledger stays a readable
size. It reads and writes the owner and planned-starts attributes itself (tests/test_architecture.py allows it).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from autotune.store._keys import (
    _DUPLICATE_OF_KEY, _FAILURE_KEY, _INFEASIBLE_KEY, _INTERRUPTED_KEY, _OWNER_KEY, _PLANNED_STARTS_KEY,
    _RESTARTS_KEY, _SUMMARY_KEY,
)
from autotune.store._owners import pid_dead as _pid_dead
from autotune.store._storage import MAX_RETRIES
from autotune.store._stored import list_of, mapping, whole

__all__ = ["WorkerRecords"]

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class WorkerRecords:
    """Who runs what, liveness, the budget the workers share (mixed into the ledger)."""

    study: optuna.Study

    def _key(self, key: str) -> str:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _get(self, attrs: Mapping[str, Any], key: str, default: Any = None) -> Any:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _has(self, attrs: Mapping[str, Any], key: str) -> bool:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _read(self, trial: Any, key: str, parse: Any, default: Any = None) -> Any:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def retried(self) -> dict[int, int]:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _counts_as_trial(self, trial: FrozenTrial, retried: Mapping[int, int]) -> bool:  # pragma: no cover
        raise NotImplementedError

    def record_owner(self, trial: optuna.Trial, owner: Mapping[str, Any]) -> None:
        trial.set_user_attr(self._key(_OWNER_KEY), dict(owner))

    def owner(self, trial: FrozenTrial) -> dict[str, Any] | None:
        return self._read(trial, _OWNER_KEY, mapping)

    def record_planned_starts(self, trial: optuna.Trial, starts: int) -> None:
        trial.set_user_attr(self._key(_PLANNED_STARTS_KEY), int(starts))

    def planned_starts(self, trial: FrozenTrial) -> int | None:
        return self._read(trial, _PLANNED_STARTS_KEY, whole)

    def _heartbeat_grace_s(self) -> float | None:
        storage = self.study._storage
        interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
        return None if interval is None else float(getattr(storage, "grace_period", None) or 2 * interval)

    def fail_stale(self) -> int:
        """Fail trials whose worker is gone and queue them again (with what they measured). Returns the count
        (:func:`autotune.store._stale.fail_stale`)."""
        from autotune.store._stale import fail_stale

        return fail_stale(self)

    def search_counts(self) -> tuple[int, int, list[FrozenTrial], int]:
        """``(finished, running, retries, queued)``: trials counting towards ``--trials``, search trials running
        now, retries of stale trials waiting for a worker (oldest first), and other queued trials (baselines,
        ``--enqueue``), which the next ask takes."""
        retried = self.retried()
        finished = running = queued = 0
        waiting: list[FrozenTrial] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            now = time.time()
            for t in self.study.get_trials(deepcopy=False):
                if t.state == TrialState.RUNNING or self._awaiting_retry(t, retried, now):  # race fix (issue 22)
                    running += 1
                elif t.state in _FINISHED:
                    finished += self._counts_as_trial(t, retried)
                elif RetryHeartbeatStaleTrialCallback.retried_trial_number(t) is not None:
                    waiting.append(t)
                else:
                    queued += 1
        return finished, running, sorted(waiting, key=lambda t: t.number), queued

    def pop_waiting(self, trial: FrozenTrial) -> optuna.Trial | None:
        """Take the waiting ``trial`` (a retry) for this process: ``None`` if another worker took it first."""
        try:
            if self.study._storage.set_trial_state_values(trial._trial_id, TrialState.RUNNING):
                return optuna.Trial(self.study, trial._trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass
        return None

    def starts_in_flight(self, unplanned: int) -> int:
        """Engine starts running and waiting search trials may still take (``unplanned`` for one that has not
        said yet): what no worker may start on top of the budget."""
        retried = self.retried()
        total = 0
        now = time.time()
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING,
                                                                 TrialState.FAIL)):
            if t.number in retried:
                continue
            # Race fix (issue 22): a dead worker's trial holds its retry's cold start from the moment its worker is
            # known gone, through the moment a peer has failed it and not yet queued the retry, so no live worker
            # can take that start in between (41 starts on a budget of 40).
            gone = self._awaiting_retry(t, retried, now) or (
                t.state == TrialState.RUNNING and _pid_dead(self.owner(t) or {}))
            if t.state == TrialState.FAIL and not gone:
                continue
            landed = len(self._read(t, _RESTARTS_KEY, list_of(mapping), []))
            planned = self.planned_starts(t)
            if planned is None:  # queued (a baseline) or just asked: it will take its first starts and a cold one
                planned = landed + unplanned + (1 if landed == 0 else 0)
            elif (t.state == TrialState.WAITING or gone) and landed:
                planned += 1  # a retry: the worker that resumes it may start its configuration cold
            total += max(0, planned - landed)
        return total

    def _awaiting_retry(self, trial: FrozenTrial, retried: Mapping[int, int], now: float) -> bool:
        """Race fix (issue 22): ``trial`` was failed a moment ago because its worker is gone, and its retry is not
        queued yet. :meth:`fail_stale` (and Optuna's ``fail_stale_trials``) fail a trial first and queue its retry
        after, in a second transaction; in between the trial is neither running nor waiting, so a peer would see
        its starts free and the search with nothing left running. A trial its own worker ended always has a summary,
        a failure reason or a repeat's mark; one failed for a stale heartbeat has none of them. After the grace
        period it no longer counts (the worker that failed it may itself have died before queuing the retry)."""
        if trial.state != TrialState.FAIL or trial.datetime_complete is None or not self._stale_failed(trial, retried):
            return False
        grace = self._heartbeat_grace_s()
        return grace is not None and now - trial.datetime_complete.timestamp() <= grace

    def _stale_failed(self, trial: FrozenTrial, retried: Mapping[int, int]) -> bool:
        """A failed ``trial`` that its own worker did not end (failed for a stale heartbeat or a dead process), not
        retried yet, with retries left."""
        if trial.state != TrialState.FAIL or trial.number in retried:
            return False
        attrs = trial.user_attrs
        if self.planned_starts(trial) is None or any(self._has(attrs, key) for key in (
                _SUMMARY_KEY, _FAILURE_KEY, _INTERRUPTED_KEY, _DUPLICATE_OF_KEY, _INFEASIBLE_KEY)):
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return len(RetryHeartbeatStaleTrialCallback.retry_history(trial)) < MAX_RETRIES  # else no retry will come

    def compile_caches(self) -> int:
        """How many compile caches (machine and workdir) the study's trials ran in: each other one may start a
        verified configuration cold once."""
        return len({(self.owner(t) or {}).get("cache") for t in self.study.get_trials(deepcopy=False)} - {None})
