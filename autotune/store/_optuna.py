"""The few Optuna internals autotune needs, behind names of its own.

Optuna has no public way to read a live trial's stored state or to name a trial to its storage (a heartbeat, a
claim): ``Study._storage`` and ``Trial._trial_id`` are the only ones. Keeping every such use here (and in the rest
of :mod:`autotune.store`) means an Optuna upgrade that renames them breaks one package, which
tests/test_architecture.py enforces.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial

__all__ = ["frozen_trial", "storage", "trial_id"]


def storage(study: optuna.Study) -> Any:
    """The study's storage object (what heartbeats and claims write to)."""
    return study._storage


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of ``trial`` (unique across the studies of one storage, unlike ``trial.number``)."""
    return trial._trial_id


def frozen_trial(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    """What the storage holds for a live trial now: its user attributes and state as other workers see them."""
    return study._storage.get_trial(trial._trial_id)
