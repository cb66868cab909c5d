"""Failing the trials of gone workers, so that their retries can run (:meth:`autotune.store.ledger.Ledger.fail_stale`)."""

from __future__ import annotations

import time
import warnings
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.store._owners import pid_dead as _pid_dead

__all__ = ["fail_stale"]


def fail_stale(ledger: Any) -> int:
    # ``ledger`` is the study's Ledger (not imported: the ledger calls this, and the import graph has no cycle).
    """Fail trials whose worker is gone and queue them again (with what they measured). Returns the count.

    Gone means: no heartbeat for the grace period (Optuna's :func:`~optuna.storages.fail_stale_trials`), or
    a process on this machine that no longer exists (no need to wait out the grace period after ``kill -9``
    and the same command again). A trial of a live worker is never failed. On a storage without heartbeats
    (``memory``: one process) nothing can be left over, and nothing is done.
    """
    storage = ledger.study._storage
    grace = ledger._heartbeat_grace_s()
    if grace is None:
        return 0
    before = len(ledger.retried())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(ledger.study)
        now = time.time()
        for t in ledger.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = ledger.owner(t)
            if owner is None:
                # Written by autotune before heartbeats existed (no owner, no heartbeat), or asked a moment
                # ago by a live worker: only the first is old.
                started = t.datetime_start.timestamp() if t.datetime_start else now
                if now - started <= grace:
                    continue
            elif not _pid_dead(owner):
                continue
            try:
                if not storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another worker failed it first
            callback = storage.get_heartbeat_stale_trial_callback()
            if callback is not None:
                callback(ledger.study, storage.get_trial(t._trial_id))
    return len(ledger.retried()) - before
