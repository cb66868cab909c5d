"""The memory floor's rule applied to a study's record (the rule itself: :mod:`autotune.decisions.floor`): the
errors of every run of a configuration, and which configurations are infeasible."""

from __future__ import annotations

from collections.abc import Iterable

from autotune.decisions.floor import floor_infeasible
from autotune.store.ledger import Ledger

__all__ = ["floor_errors", "infeasible_keys"]


def floor_errors(ledger: Ledger, key: str, *, besides: int | None = None) -> list[str | None]:
    """The restart errors of every run of configuration ``key``: its search trials (a retried trial's restarts
    once, on its latest retry; trial ``besides`` left out, for the caller to add its own) and verification."""
    retried = ledger.retried()
    errors: list[str | None] = []
    for trial in ledger.study.get_trials(deepcopy=False):
        if trial.number == besides or trial.number in retried or ledger.config_key(trial) != key:
            continue
        errors += [r.error for r in ledger.restarts(trial)]
    for by_key in ledger.verify_rounds().values():
        errors += [str(d.get("error")) if d.get("error") else None for d in by_key.get(key, ())]
    return errors


def infeasible_keys(ledger: Ledger, keys: Iterable[str]) -> set[str]:
    """Those of ``keys`` whose restarts hit the memory floor twice."""
    return {key for key in set(keys) if floor_infeasible(floor_errors(ledger, key))}
