"""Why a study has nothing to claim: the measurements a verdict needs (issue 32, principle 4).

A verdict rests on a measured baseline and a measured winner, and "keep the engine defaults" on a comparison: a
challenger measured in verification, or one measured against the baseline in the search. A study whose challengers
all failed, or that was cut short before any finished, prints no advice: it says what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from autotune.core.records import EngineConfig
from autotune.report._counts import COMPLETE, RACED_OUT, SCREENED, FailedTrial, TrialCounts


class VerifiedRow(Protocol):
    """What this module reads of a verification table's row (:class:`autotune.report._report.VerifiedRow`, which
    imports this module)."""

    @property
    def label(self) -> str: ...
    @property
    def config(self) -> EngineConfig: ...
    @property
    def is_baseline(self) -> bool: ...
    @property
    def status(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def failure(self) -> str | None: ...
    @property
    def restarts(self) -> Sequence[Any]: ...
    @property
    def speedup(self) -> Any: ...

__all__ = ["compared_in_search", "no_result_reason"]


def compared_in_search(outcomes: Sequence[Any], records: Sequence[Any], baseline: VerifiedRow | None) -> int:
    """Search trials of another configuration than the baseline's that were measured against it: complete (the
    output check's exclusions among them), raced out or screened on their cold start. A failed or interrupted
    trial measured nothing to compare."""
    if baseline is None:
        return 0
    measured = {o.trial for o in outcomes if o.outcome in (COMPLETE, RACED_OUT, SCREENED)}
    base = baseline.config.key()
    return sum(1 for r in records if r.number in measured and r.duplicate_of is None and r.config is not None
               and r.config.key() != base)


def _paired_interval(row: VerifiedRow) -> bool:
    sp = row.speedup
    return sp is not None and getattr(sp, "pairs", None) is not None and sp.ci_low is not None


def no_result_reason(counts: TrialCounts, failures: Sequence[FailedTrial], winner: VerifiedRow | None,
                     baseline: VerifiedRow | None, verified: bool, rows: Sequence[VerifiedRow] = (),
                     compared: int = 0) -> str | None:
    """Why the study has nothing to claim, or ``None``.

    A study that verified must have a measured winner and a measured baseline (else there is no speedup to
    state, and no configuration to export), and a comparison with a challenger, in verification or in the search
    (``compared``: :func:`compared_in_search`; else "keep the engine defaults" would rest on no comparison, issue
    32); one that did not verify (``--no-verify``, or stopped before it) must have measured at least one search
    trial.
    """
    if verified:
        # A baseline that failed some restarts still gives a verdict from the rounds both sides ran (issue 44,
        # principle 8): a paired comparison with an interval is the measurement the verdict needs.
        paired = winner is not None and _paired_interval(winner)
        if baseline is None or not baseline.n or (baseline.status != "ok" and not paired):
            label = baseline.label if baseline is not None else "engine defaults"
            why = baseline.failure if baseline is not None else None
            if not why and (baseline is None or not baseline.restarts):
                # Verification ran none of its restarts: the reason is the search's (the floor rule's infeasible
                # baseline), never "no restart succeeded" of restarts that did not run.
                why = next((f"none of its restarts ran: in the search, {f.reason}" for f in failures
                            if f.label == label), "none of its restarts ran")
            why = why or "no restart succeeded"
            if baseline is not None and baseline.n:
                # Some of its restarts ran (then, say, a second floor hit made it infeasible): "not measured" would
                # misstate the record.
                return (f"the baseline ({label}) lost its place in verification after {baseline.n} measured "
                        f"restart(s): {why}; without it no speedup can be claimed")
            return f"the baseline ({label}) was not measured in verification: {why}; without it no speedup can be claimed"
        if winner is None or winner.status != "ok" or not winner.n:
            why = (winner.failure if winner is not None else None) or "no restart succeeded"
            return f"no verified configuration was measured: {why}"
        # "Keep the defaults" needs a comparison: a challenger measured in verification, or one measured against the
        # baseline in the search (raced out on matched seeds, or excluded by the output check: comparisons that
        # finished). Challengers that only failed or were cut short compared nothing.
        if not compared and not any(not r.is_baseline and r.status == "ok" and r.n for r in rows):
            why = next((r.failure for r in rows if r.failure and not r.is_baseline), None) or next(
                (f.reason for f in failures), "the search measured no configuration but the engine defaults")
            return f"no configuration was compared with the baseline in verification: {why}"
        return None
    if not counts.complete:
        return "no search trial was measured" + (f": {failures[0].reason}" if failures else "")
    return None
