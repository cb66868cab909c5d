"""The memory floor's rule for a configuration: a restart the guard killed is run once more; a configuration whose
restarts hit the floor twice is infeasible, never run again and never a winner.

One hit may be the host's doing (another program's memory, page cache that had not come back), so the trial runs
that restart again; a second hit, in this trial or any earlier one or in verification, says the configuration
itself takes the host under the floor. The trial that finds it records Optuna's constraint
:data:`~autotune.machine.FLOOR_CONSTRAINT` (``hits - 1``: > 0, infeasible) and fails, so no sampler ranks it and a
repeat of it is told its failure (``find_duplicate``) without running; any other path that would start it again (a
queued trial, verification) asks :func:`infeasible_keys` first.

The sampler is told such a trial as PRUNED (:func:`sampler_state`), not FAIL: Optuna's samplers read only complete
and pruned trials (TPE puts those whose constraints are violated below every feasible one), so a failed trial is
invisible to them and TPE went on proposing the configurations around it, each one another two starts the guard
killed (issue 20: 14-24 of a 60-start gb10 study). The trial is still a failure in the record, the report and
MLflow (:func:`~autotune.store.ledger.over_floor`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from optuna.trial import TrialState

from autotune.core.records import RestartResult
from autotune.core.transient import standing
from autotune.machine import GUARD_PREFIX, floor_constraint, floor_hits, floor_infeasible
from autotune.store.ledger import Ledger

__all__ = ["counted_for_summary", "floor_constraint", "floor_errors", "hit_floor", "infeasible_keys",
           "infeasible_reason", "sampler_state"]


def hit_floor(result: RestartResult) -> bool:
    """Whether the memory guard killed this restart."""
    return not result.ok and (result.error or "").startswith(GUARD_PREFIX)


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
