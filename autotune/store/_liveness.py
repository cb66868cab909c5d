"""Who holds a study right now: the live processes behind its RUNNING trials and verification claims.

``tune --fresh`` deletes the study it names; doing that under a run that is still measuring it makes that run die
on its next write ("Cannot tell a WAITING trial") or, worse, land its restarts in the new study. So before
deleting, the command asks who holds the study, with the same two tests the study's own stale-trial sweep uses
(:meth:`autotune.store.ledger.Ledger.fail_stale`): a holder on this machine is alive while its process exists; a
holder elsewhere is alive while its Optuna heartbeat is recent.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from autotune.store.ledger import (CLAIMS_SUFFIX, DEFAULT_HEARTBEAT_S, GRACE_FACTOR, Ledger, claim_job, claim_owner,
                                   make_storage, owner_id)

__all__ = ["Holder", "live_holders"]


@dataclasses.dataclass(frozen=True)
class Holder:
    """A live process holding a study: where it runs and what it holds."""

    host: str
    pid: int | None
    holds: str

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host} ({self.holds})" if self.pid is not None else \
            f"a worker on {self.host} ({self.holds})"


def _process_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # it exists, we may not look at it: alive


def _alive(owner: Mapping[str, Any] | None, trial: FrozenTrial, heartbeat_stale: bool, grace_s: float,
           machine: str) -> bool:
    if isinstance(owner, Mapping) and machine and owner.get("machine") == machine and isinstance(owner.get("pid"), int):
        return _process_alive(owner["pid"])  # this machine: the process itself says
    if owner is None:
        # Written before owners were recorded, or asked a moment ago: only a recent one can have a live holder.
        started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
        return time.time() - started <= grace_s
    return not heartbeat_stale


def live_holders(storage: str, study_name: str, heartbeat_s: int = DEFAULT_HEARTBEAT_S) -> list[Holder]:
    """The live holders of ``study_name``'s RUNNING trials and claims in ``storage`` (empty: nobody runs it).

    Args:
        storage: The Optuna storage URL (``memory`` holds nothing another process could run).
        study_name: The study.
        heartbeat_s: The heartbeat interval the holders use; a heartbeat older than :data:`GRACE_FACTOR` times it
            is stale (a holder elsewhere that stopped beating).
    """
    if storage == "memory":
        return []
    store = make_storage(storage, heartbeat_s=heartbeat_s)
    names = {s.study_name for s in optuna.get_all_study_summaries(store)}
    machine = owner_id()["machine"]
    grace_s = float(GRACE_FACTOR * heartbeat_s)
    holders: list[Holder] = []
    for name in (study_name, study_name + CLAIMS_SUFFIX):
        if name not in names:
            continue
        study = optuna.load_study(study_name=name, storage=store)
        is_claims = name != study_name
        ledger = None if is_claims else Ledger(study)
        stale_ids: list[int] = getattr(store, "_get_stale_trial_ids", lambda _id: [])(study._study_id)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = claim_owner(trial) if ledger is None else ledger.owner(trial)
            if not _alive(owner, trial, trial._trial_id in stale_ids, grace_s, machine):
                continue
            holds = f"claim {claim_job(trial)}" if is_claims else f"trial {trial.number}"
            owner = owner if isinstance(owner, Mapping) else {}
            holders.append(Holder(str(owner.get("host") or "an unknown host"), owner.get("pid"), holds))
    return holders
