"""One search trial as observers and reports see it: :class:`TrialRecord`."""

from __future__ import annotations

import dataclasses

from autotune.core.records import EngineConfig, RestartResult
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
