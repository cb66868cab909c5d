"""Search trials by outcome: one classification that the report's header counts and the lists below it both read.

The H200 report's header said "2 failed" while its list showed one: the header counted every Optuna ``FAIL``
(an interrupted trial queued again, a trial given back before it started, a dead worker's trial that Optuna
retried) while the list showed only the trials with a failure reason and a configuration. Here each trial gets
exactly one outcome, and a count is always the length of the list of that outcome.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from optuna.trial import TrialState

from autotune.store.ledger import Ledger, trial_failed
from autotune.store.search_end import INTERRUPTED as SEARCH_INTERRUPTED

__all__ = ["FailedTrial", "TrialCounts", "TrialOutcome", "classify_trials", "count_outcomes"]

#: Each finished search trial's one outcome.
COMPLETE, SCREENED, RACED_OUT, FAILED = "complete", "screened", "raced_out", "failed"
#: Cut short (Ctrl-C, SIGTERM, a worker that stopped beating): its configuration was queued again.
INTERRUPTED = "interrupted"
#: Asked for, then given back before any engine started (the budget or another worker closed the search).
NOT_STARTED = "not_started"
DUPLICATE, INFEASIBLE = "duplicate", "infeasible"


@dataclasses.dataclass(frozen=True)
class TrialOutcome:
    """One finished search trial's outcome, with its configuration's label and the one-line reason, if any."""

    trial: int
    outcome: str
    label: str | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class TrialCounts:
    """Search trials by outcome (:func:`count_outcomes`); repeats of a configuration and infeasible suggestions apart.

    ``screened`` trials stopped at a cold start that showed they could not be the best (Optuna holds them as
    complete, with the predicted value the sampler was told); they have no counted restart, so they are not among
    ``complete``. ``interrupted`` trials were cut short and queued again (they are not failures);
    ``not_started`` trials were given back before any engine started.
    """

    complete: int = 0
    pruned: int = 0
    fail: int = 0
    duplicates: int = 0
    infeasible: int = 0
    screened: int = 0
    interrupted: int = 0
    not_started: int = 0


@dataclasses.dataclass(frozen=True)
class FailedTrial:
    trial: int
    label: str
    reason: str


def classify_trials(ledger: Ledger) -> tuple[TrialOutcome, ...]:
    """Every finished search trial with its one outcome, in trial order (running and waiting trials have none)."""
    retried = ledger.retried()
    out: list[TrialOutcome] = []
    for t in ledger.study.get_trials(deepcopy=False):
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
            continue
        label, reason = ledger.label(t), ledger.failure(t)
        if ledger.is_infeasible(t):
            outcome, reason = INFEASIBLE, ledger.infeasible(t)
        elif ledger.is_duplicate(t):
            outcome, reason = DUPLICATE, None
        elif ledger.interrupted(t, retried):
            # A trial given back before it started never got a configuration: nothing ran, nothing to list.
            outcome = INTERRUPTED if ledger.has_config(t) else NOT_STARTED
            if reason is None and t.number in retried:
                reason = f"interrupted: its worker stopped (no heartbeat); retried as trial {retried[t.number]}"
        elif trial_failed(t):  # FAIL, or over the memory floor (told PRUNED so the sampler reads its constraint)
            # A worker that stopped beating leaves a FAIL with no reason until Optuna queues its retry.
            outcome, reason = FAILED, reason or "failed with no reason recorded (its worker stopped)"
        elif t.state == TrialState.PRUNED:
            outcome, reason = RACED_OUT, ledger.pruned_reason(t)
        else:
            outcome, reason = (SCREENED if ledger.pruned_reason(t) else COMPLETE), ledger.pruned_reason(t)
        out.append(TrialOutcome(t.number, outcome, label, reason))
    return tuple(_with_rerun(o, ledger) if o.outcome == INTERRUPTED else o for o in out)


def _with_rerun(outcome: TrialOutcome, ledger: Ledger) -> TrialOutcome:
    """An interrupted trial's reason with what became of its configuration, queued again with the same params.

    The H200 MoE study's report said of three interrupted trials "their configurations ran again" while one never
    did: the resume found the budget spent and went to verification. Each trial now says which.
    """
    reason = outcome.reason or "interrupted"
    if "retried as trial" in reason:
        return outcome  # a dead worker's trial: Optuna's retry is named already
    trials = ledger.study.get_trials(deepcopy=False)
    mine = next(t for t in trials if t.number == outcome.trial)
    # A trial queued again has its params as Optuna's fixed params until a worker takes it.
    later = [t for t in trials if t.number > mine.number
             and (t.params or t.system_attrs.get("fixed_params")) == mine.params]
    ran = next((t for t in later if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
                and not ledger.interrupted(t) and ledger.has_config(t)), None)
    if ran is not None:
        suffix = f"ran again as trial {ran.number}"
    elif any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in later):
        end = ledger.search_end()
        over = end is not None and end.reason != SEARCH_INTERRUPTED
        suffix = ("queued again, not run: the search ended first" if over
                  else "queued again: it runs when the study resumes")
    else:
        suffix = "not run again"
    return dataclasses.replace(outcome, reason=f"{reason}; {suffix}")


def count_outcomes(outcomes: Sequence[TrialOutcome]) -> TrialCounts:
    """The header's counts: the length of each outcome's list."""

    def n(outcome: str) -> int:
        return sum(1 for o in outcomes if o.outcome == outcome)

    return TrialCounts(complete=n(COMPLETE), pruned=n(RACED_OUT), fail=n(FAILED), duplicates=n(DUPLICATE),
                       infeasible=n(INFEASIBLE), screened=n(SCREENED), interrupted=n(INTERRUPTED),
                       not_started=n(NOT_STARTED))


def listed(outcomes: Sequence[TrialOutcome], outcome: str) -> tuple[FailedTrial, ...]:
    """The trials of one outcome as the report lists them (number, label, reason)."""
    return tuple(FailedTrial(o.trial, o.label or "(no configuration)", o.reason or "") for o in outcomes
                 if o.outcome == outcome)
