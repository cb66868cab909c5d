"""The memory floor's rule applied to a study's record (the rule itself: :mod:`autotune.decisions.floor`): the
restarts of every run of a configuration, and which configurations are infeasible."""

from __future__ import annotations

from collections.abc import Iterable

from autotune.records import decode
from autotune.core.records import RestartResult
from autotune.decisions.floor import floor_infeasible
from autotune.store.ledger import Ledger

__all__ = ["floor_restarts", "infeasible_keys"]


def floor_restarts(ledger: Ledger, key: str, *, besides: int | None = None) -> list[RestartResult]:
    """The restarts of every run of configuration ``key``: its search trials (a retried trial's restarts once, on
    its latest retry; trial ``besides`` left out, for the caller to add its own) and verification."""
    retried = ledger.retried()
    restarts: list[RestartResult] = []
    for trial in ledger.study.get_trials(deepcopy=False):
        if trial.number == besides or trial.number in retried or ledger.config_key(trial) != key:
            continue
        restarts += ledger.restarts(trial)
    for by_key in ledger.verify_rounds().values():
        restarts += [decode(RestartResult, d) for d in by_key.get(key, ())]
    return restarts


def infeasible_keys(ledger: Ledger, keys: Iterable[str]) -> set[str]:
    """Those of ``keys`` whose restarts hit the memory floor twice."""
    return {key for key in set(keys) if floor_infeasible(floor_restarts(ledger, key))}
