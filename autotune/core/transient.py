"""Transient restart failures: the machine's doing, not the configuration's (issue 32, principle 4).

A restart the memory guard killed (a passing memory burst on a shared host, page cache that had not come back), or
one lost with the vLLM forkserver host that ran it (the OOM killer took the host), says nothing yet about the
configuration. The rule, the same in the search and in verification (:func:`autotune.study._restart.measure_restart`):
such a restart is run once more on the same seed, the budget allowing, before its configuration loses its place;
the failure stays in the record and the report, but only a restart that failed again (or for another reason) makes
the configuration a failure. Two guard trips of one configuration are the floor rule's business
(:func:`autotune.decisions.floor.floor_infeasible`): such a configuration is infeasible and gets no more starts.

A restart's kind says which it was (:func:`autotune.core.failure.kind_of`, which reads a stored restart of any
version the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.core.failure import GUARD_PREFIX, LOST_PREFIX, FailureKind, kind_of
from autotune.core.records import RestartResult

__all__ = ["GUARD_PREFIX", "LOST_PREFIX", "TRANSIENT_RUNS_AGAIN", "FailureKind", "is_transient", "kind_of",
           "standing"]

#: Times a transiently failed restart is run again (docs/gb10.md: "a restart the guard killed is run once more").
TRANSIENT_RUNS_AGAIN = 1


def is_transient(result: RestartResult) -> bool:
    """Whether ``result`` failed for the machine's reasons (:attr:`FailureKind.transient`), not the configuration's."""
    kind = kind_of(result)
    return kind is not None and kind.transient


def standing(restarts: Sequence[RestartResult]) -> list[RestartResult]:
    """The restarts a summary reads: a transient failure that was run again is in the record, not here (the
    configuration went on from its rerun); the last restart always is."""
    return [r for i, r in enumerate(restarts) if i == len(restarts) - 1 or not is_transient(r)]
