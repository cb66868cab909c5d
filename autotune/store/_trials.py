"""One search trial as observers and reports see it: :class:`TrialRecord`."""

from __future__ import annotations

import dataclasses

from optuna.trial import FrozenTrial, TrialState

from autotune.core.records import EngineConfig, RestartResult
from autotune.decisions.floor import FLOOR_CONSTRAINT
from autotune.stats.intervals import TrialSummary


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


def over_floor(trial: FrozenTrial) -> bool:
    """Whether the trial failed because its configuration hit the memory floor twice: Optuna was told PRUNED, so that
    its samplers read the constraint (:func:`autotune.decisions.floor.sampler_state`), but it is a failure."""
    return trial.constraints.get(FLOOR_CONSTRAINT, 0.0) > 0 and trial.state in (TrialState.FAIL, TrialState.PRUNED)


def trial_failed(trial: FrozenTrial) -> bool:
    """Whether the trial failed: Optuna's FAIL, or a configuration over the memory floor (told PRUNED)."""
    return trial.state == TrialState.FAIL or over_floor(trial)
