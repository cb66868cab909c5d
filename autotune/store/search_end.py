"""Why a study's search ended, with the numbers: :class:`SearchEnd`, decided where it happens and stored.

The H200 study measured two configurations in 16 engine-minutes and its report never said why it stopped. The
search loop (:mod:`autotune.study._optimize`) decides the reason when the search ends and stores it here; the
report, ``report --json`` and a resumed study that goes straight to verification say it in one line.
"""

from __future__ import annotations

import dataclasses

__all__ = ["BASELINE_FAILED", "BUDGET", "CONVERGED", "INFEASIBLE", "INTERRUPTED", "REASONS", "TRIALS", "SearchEnd"]

#: The search reached its trial count (``--trials``).
TRIALS = "trials_reached"
#: The engine-start budget has no room for another search trial next to what verification needs.
BUDGET = "budget_spent"
#: The sampler kept suggesting configurations it had measured already: it has converged (or the space is exhausted).
CONVERGED = "converged"
#: The sampler's suggestions in a row were all ruled out by the space's constraints.
INFEASIBLE = "all_infeasible"
#: The engine defaults failed, so no speedup can be claimed (:func:`autotune.study._optimize._search`).
BASELINE_FAILED = "baseline_failed"
#: Ctrl-C, SIGTERM or SIGHUP during the search; the same command resumes it.
INTERRUPTED = "interrupted"
REASONS = (TRIALS, BUDGET, CONVERGED, INFEASIBLE, BASELINE_FAILED, INTERRUPTED)


def _minutes(x: float) -> str:
    return f"{x:.1f}"


@dataclasses.dataclass(frozen=True)
class SearchEnd:
    """Why the search ended, and the numbers that say so.

    Attributes:
        reason: One of :data:`REASONS`.
        trials_done: Search trials that count towards ``--trials`` when it ended.
        trials_target: ``--trials``.
        starts_used, minutes_used: Engine starts and engine-minutes spent (search and verification so far).
        budget_restarts, budget_minutes: The budgets set (``None``: not set).
        verify_starts, verify_minutes: What verification still needs (starts, and minutes at the measured prices).
        next_starts, next_minutes: What one more search trial would have needed.
        detail: The rest in words (the baseline's failure, the signal, the suggestions in a row).
    """

    reason: str
    trials_done: int = 0
    trials_target: int = 0
    starts_used: int = 0
    minutes_used: float = 0.0
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    verify_starts: int | None = None
    verify_minutes: float | None = None
    next_starts: int | None = None
    next_minutes: float | None = None
    detail: str | None = None

    def describe(self) -> str:
        """One line with the numbers, e.g. ``budget spent: 14.2 of 16 engine-minutes used, 1.8 left; ...``."""
        trials = f"{self.trials_done} of {self.trials_target} trials done"
        if self.reason == TRIALS:
            return f"trials reached: {trials}"
        if self.reason == BUDGET:
            return f"budget spent: {self._budget_text()} ({trials})"
        if self.reason == CONVERGED:
            return f"converged: {self.detail or 'the sampler repeated configurations it had measured'} ({trials})"
        if self.reason == INFEASIBLE:
            return f"all candidates infeasible: {self.detail or 'every suggestion broke a constraint'} ({trials})"
        if self.reason == BASELINE_FAILED:
            return f"the baseline failed: {self.detail or 'engine defaults did not run'} ({trials})"
        if self.reason == INTERRUPTED:
            return f"{self.detail or 'interrupted'} ({trials}; the same command resumes)"
        return f"{self.reason} ({trials})"

    def _budget_text(self) -> str:
        parts = []
        if self.budget_minutes is not None:
            left = max(0.0, self.budget_minutes - self.minutes_used)
            parts.append(f"{_minutes(self.minutes_used)} of {self.budget_minutes:g} engine-minutes used, "
                         f"{_minutes(left)} left")
        if self.budget_restarts is not None:
            parts.append(f"{self.starts_used} of {self.budget_restarts} engine starts used, "
                         f"{max(0, self.budget_restarts - self.starts_used)} left")
        need = []
        if self.verify_starts is not None:
            need.append(f"verification needs {self.verify_starts} starts"
                        + (f" (~{_minutes(self.verify_minutes)} min)" if self.verify_minutes is not None else ""))
        if self.next_starts is not None:
            need.append(f"another trial {self.next_starts}"
                        + (f" (~{_minutes(self.next_minutes)} min)" if self.next_minutes is not None else ""))
        return "; ".join(parts + ([", ".join(need)] if need else []))
