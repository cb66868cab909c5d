"""Why the search ended, decided where it ends (:mod:`autotune.study._optimize`, :func:`autotune.study.run_study`)
with the numbers that say so, and stored through the ledger (:class:`~autotune.store.search_end.SearchEnd`)."""

from __future__ import annotations

from autotune.store.search_end import BASELINE_FAILED, BUDGET, CONVERGED, INFEASIBLE, TRIALS, SearchEnd
from autotune.study._budget import StartCosts, _entry_starts, _verify_plan
from autotune.study.events import StudyContext

__all__ = ["search_end"]

#: Reasons decided by the search loop itself when it happens; a later look at the ended search keeps them.
_DECIDED_EARLY = (CONVERGED, INFEASIBLE, BASELINE_FAILED)


def search_end(ctx: StudyContext, reason: str | None = None, detail: str | None = None) -> SearchEnd:
    """The search's end now, with the numbers: ``reason`` when the caller knows it (converged, the baseline failed,
    interrupted), else the trial count when it is reached, else the budget (the only other way the search runs out
    of trials to start: :func:`autotune.study._optimize._next_trial`)."""
    ledger, options = ctx.ledger, ctx.options
    finished = ledger.finished_search_trials()
    if reason is None:
        stored = ledger.search_end()
        if ledger.search_stopped() is not None and stored is not None and stored.reason in _DECIDED_EARLY:
            reason, detail = stored.reason, stored.detail
        elif ledger.search_stopped() is not None:
            # Stopped by autotune before the reason was stored with its numbers: its words say which.
            detail = ledger.search_stopped()
            reason = BASELINE_FAILED if "baseline" in str(detail) else CONVERGED
        else:
            reason = TRIALS if finished >= options.trials else BUDGET
    used, minutes = ledger.budget_used()
    costs = StartCosts.of(ledger)
    plan = _verify_plan(ledger, ctx.space, options)
    # Minutes are forecast only at measured prices; before any start was measured there is nothing to price.
    priced = costs.known and options.budget_minutes is not None
    entry = _entry_starts(options, ledger.cold_verdict()) if reason == BUDGET else None
    return SearchEnd(
        reason, finished, options.trials, used, round(minutes, 3), options.budget_restarts, options.budget_minutes,
        verify_starts=len(plan) if options.verify else None,
        verify_minutes=round(costs.forecast(plan), 3) if priced and options.verify else None,
        next_starts=None if entry is None else len(entry),
        next_minutes=round(costs.forecast(entry), 3) if priced and entry is not None else None,
        detail=detail)
