"""The memory floor's rule for a configuration (issue 32, principle 8: the rule is a decision, so it lives here, not
in the guard that measures nor in the study that applies it).

A restart the memory guard killed (:data:`~autotune.core.transient.GUARD_PREFIX`) is run once more: one hit may be
the host's doing (another program's memory, page cache that had not come back). A second hit, in the trial, an
earlier trial or verification, says the configuration itself takes the host under the floor: it is infeasible,
recorded as Optuna's constraint :data:`FLOOR_CONSTRAINT` (``hits - 1``: > 0), never run again and never a winner.

The sampler is told such a trial as PRUNED (:func:`sampler_state`), not FAIL: Optuna's samplers read only complete
and pruned trials (TPE puts those whose constraints are violated below every feasible one), so a failed trial is
invisible to them and TPE went on proposing the configurations around it (issue 20: 14-24 of a 60-start gb10
study's starts killed by the guard).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from optuna.trial import TrialState

from autotune.core.records import RestartResult
from autotune.core.transient import GUARD_PREFIX, standing

__all__ = ["FLOOR_CONSTRAINT", "FLOOR_HITS_INFEASIBLE", "counted_for_summary", "floor_constraint", "floor_hits",
           "floor_infeasible", "hit_floor", "infeasible_reason", "is_guard_trip", "sampler_state"]

#: The Optuna constraint a configuration carries (``Trial.set_constraint``; feasible at or below 0).
FLOOR_CONSTRAINT = "memory_floor"
#: Hits of the floor after which a configuration is infeasible (one may be the host's doing).
FLOOR_HITS_INFEASIBLE = 2


def is_guard_trip(error: str | None) -> bool:
    """Whether a restart's error is the memory guard's kill (every guard failure reason starts with
    :data:`GUARD_PREFIX`, in records of every autotune version: the reason is what the store keeps)."""
    return error is not None and error.startswith(GUARD_PREFIX)


def hit_floor(result: RestartResult) -> bool:
    """Whether the memory guard killed this restart."""
    return not result.ok and is_guard_trip(result.error)


def floor_hits(errors: Iterable[str | None]) -> int:
    """How many of a configuration's restart errors are guard trips."""
    return sum(1 for e in errors if is_guard_trip(e))


def floor_constraint(errors: Iterable[str | None]) -> float:
    """Optuna's constraint value for :data:`FLOOR_CONSTRAINT` from a configuration's restart errors (all of its
    trials): ``hits - 1``, so one hit is still feasible (0) and two are not (> 0)."""
    return float(floor_hits(errors) - (FLOOR_HITS_INFEASIBLE - 1))


def floor_infeasible(errors: Iterable[str | None]) -> bool:
    """Whether the configuration hit the floor often enough never to run again and never to win."""
    return floor_hits(errors) >= FLOOR_HITS_INFEASIBLE


def infeasible_reason(errors: Sequence[str | None]) -> str:
    return (f"memory guard: its restarts hit the memory floor {floor_hits(errors)} times; a configuration that does "
            "this twice is infeasible (never run again, never a winner)")


def counted_for_summary(restarts: Sequence[RestartResult]) -> list[RestartResult]:
    """The restarts a trial's summary reads: a floor hit (or another transient failure) that was run again is in
    the record, not in the summary (the trial went on from its rerun); the last restart always is."""
    return standing(restarts)


def sampler_state(state: TrialState, floor_errors: Sequence[str | None] | None) -> TrialState:
    """The state Optuna is told for a trial that ended in ``state`` (not COMPLETE): PRUNED for one whose
    configuration the floor made infeasible (its constraint is recorded first), so the sampler sees it among the
    infeasible trials instead of not at all; ``state`` otherwise."""
    return TrialState.PRUNED if floor_errors is not None and state == TrialState.FAIL else state
