"""The memory floor's rule for a configuration (issue 32, principle 8: the rule is a decision, so it lives here, not
in the guard that measures nor in the study that applies it).

A restart the memory guard killed (:attr:`~autotune.core.failure.FailureKind.GUARD`) is run once more: one hit may be
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

from autotune.core.failure import FailureKind, kind_of
from autotune.core.records import RestartResult
from autotune.core.transient import standing

__all__ = ["FLOOR_CONSTRAINT", "FLOOR_HITS_INFEASIBLE", "counted_for_summary", "floor_constraint", "floor_hits",
           "floor_infeasible", "hit_floor", "infeasible_reason", "sampler_state"]

#: The Optuna constraint a configuration carries (``Trial.set_constraint``; feasible at or below 0).
FLOOR_CONSTRAINT = "memory_floor"
#: Hits of the floor after which a configuration is infeasible (one may be the host's doing).
FLOOR_HITS_INFEASIBLE = 2


def hit_floor(result: RestartResult) -> bool:
    """Whether the memory guard killed this restart (:func:`~autotune.core.failure.kind_of`: the kind the engine
    set, or the reason's prefix of a restart stored before restarts carried one)."""
    return kind_of(result) is FailureKind.GUARD


def floor_hits(restarts: Iterable[RestartResult]) -> int:
    """How many of a configuration's restarts the guard killed."""
    return sum(1 for r in restarts if hit_floor(r))


def floor_constraint(restarts: Iterable[RestartResult]) -> float:
    """Optuna's constraint value for :data:`FLOOR_CONSTRAINT` from a configuration's restarts (all of its trials and
    verification): ``hits - 1``, so one hit is still feasible (0) and two are not (> 0)."""
    return float(floor_hits(restarts) - (FLOOR_HITS_INFEASIBLE - 1))


def floor_infeasible(restarts: Iterable[RestartResult]) -> bool:
    """Whether the configuration hit the floor often enough never to run again and never to win."""
    return floor_hits(restarts) >= FLOOR_HITS_INFEASIBLE


def infeasible_reason(restarts: Sequence[RestartResult]) -> str:
    return (f"memory guard: its restarts hit the memory floor {floor_hits(restarts)} times; a configuration that does "
            "this twice is infeasible (never run again, never a winner)")


def counted_for_summary(restarts: Sequence[RestartResult]) -> list[RestartResult]:
    """The restarts a trial's summary reads: a floor hit (or another transient failure) that was run again is in
    the record, not in the summary (the trial went on from its rerun); the last restart always is."""
    return standing(restarts)


def sampler_state(state: TrialState, floor_restarts: Sequence[RestartResult] | None) -> TrialState:
    """The state Optuna is told for a trial that ended in ``state`` (not COMPLETE): PRUNED for one whose
    configuration the floor made infeasible (its constraint is recorded first), so the sampler sees it among the
    infeasible trials instead of not at all; ``state`` otherwise."""
    return TrialState.PRUNED if floor_restarts is not None and state == TrialState.FAIL else state
