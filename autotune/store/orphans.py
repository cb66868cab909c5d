"""Trials failed for a dead worker whose retry was never queued: found after the grace period, queued once.

:meth:`Ledger.fail_stale <autotune.store.ledger.Ledger.fail_stale>` (like Optuna's ``fail_stale_trials``) fails a
trial and queues its retry in two transactions. A process that dies in between - a full disk refuses the second
write (issue 22, FS01) - leaves the trial failed with its restarts stored and no retry, and its configuration would
silently drop out of the search. Within the heartbeat grace period the process that failed it may still queue the
retry (the ledger counts the trial as running meanwhile); after it, nobody will, so the next worker to look queues
it, under a claim so that several workers looking at once queue it once.
"""

from __future__ import annotations

import time
from typing import Any

from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

from autotune.store._keys import _REQUEUE_JOB
from autotune.store.ledger import Ledger

__all__ = ["orphaned_failures", "requeue", "requeue_job", "requeue_orphans"]


def orphaned_failures(ledger: Ledger) -> list[FrozenTrial]:
    """Failed trials no worker ended and none retried, failed longer ago than the heartbeat grace period."""
    grace = ledger._heartbeat_grace_s()
    if grace is None:
        return []  # no heartbeats (``memory``): one process, nothing left over
    retried, now = ledger.retried(), time.time()
    return [t for t in ledger.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if t.datetime_complete is not None and now - t.datetime_complete.timestamp() > grace
            and ledger._stale_failed(t, retried)]


def requeue_job(trial: FrozenTrial) -> str:
    """The claim under which one worker only queues ``trial`` again."""
    return _REQUEUE_JOB.format(trial.number)


def requeue(ledger: Ledger, trial: FrozenTrial) -> bool:
    """Queue ``trial`` again with what it measured, as Optuna's stale-trial callback would have; ``False`` when its
    retry is queued already. The caller holds :func:`requeue_job`'s claim."""
    if trial.number in ledger.retried():
        return False
    storage = ledger.study._storage
    if not isinstance(storage, BaseHeartbeat):
        return False  # no heartbeats (``memory``): no stale-trial callback to requeue with
    callback = storage.get_heartbeat_stale_trial_callback()
    if callback is None:
        return False
    callback(ledger.study, storage.get_trial(trial._trial_id))
    return True


def requeue_orphans(ledger: Ledger, claims: Any = None) -> int:
    """Queue every orphaned failure again, each under its claim (:class:`~autotune.store.claims.Claims`; without
    claims, one process alone on the study). Returns how many this process queued."""
    queued = 0
    for trial in orphaned_failures(ledger):
        claim = claims.try_claim(requeue_job(trial)) if claims is not None else None
        if claims is not None and claim is None:
            continue  # another worker queues it (or did)
        queued += requeue(ledger, trial)
        if claim is not None:
            claim.complete()
    return queued
