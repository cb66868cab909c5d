"""The verification table as text: each configuration's fresh restarts, the verdict under it and what stands behind
it (the sequential design, the plan, an open verdict's note); a part of :func:`~autotune.report._report.render_report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from autotune.decisions.sequential import sequential_lines
from autotune.report.latency import SloOutcome
from autotune.stats.intervals import Verdict
from autotune.store.ledger import StudyMeta

if TYPE_CHECKING:  # the row types only; _report imports this module, so the report itself is a protocol here
    from autotune.report._rows import VerificationTable, VerifiedRow


class ReportView(Protocol):
    """What the verification's text reads of a :class:`~autotune.report._report.Report` (read only: the report is
    frozen)."""

    @property
    def meta(self) -> StudyMeta: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def objective(self) -> str: ...
    @property
    def slo_outcome(self) -> SloOutcome | None: ...
    @property
    def no_result(self) -> str | None: ...
    @property
    def levels(self) -> Sequence[object]: ...
    @property
    def winner_is_baseline(self) -> bool: ...

__all__ = ["verification_lines"]


def _baseline_won(report: ReportView, table: VerificationTable) -> str:
    """What the best challenger's comparison says when the baseline won: slower for sure, the same within the
    margin, or not yet known (the study's answer, :meth:`Verification.answer`)."""
    shown = [(e.speedup, e.label) for e in table.entries
             if not e.is_baseline and e.speedup is not None and e.speedup.has_interval]
    if not shown:
        return ""
    speedup, label = max(shown, key=lambda sl: sl[0].speedup)
    text = f" ({label}: {speedup.oneliner()}"
    if report.verdict == Verdict.SLOWER:
        return text + ", slower)"
    if report.verdict == Verdict.EQUIVALENT:
        return text + ", equivalent within the margin)"
    return text + ", undecided)"


def _failures_behind(table: VerificationTable, pairs: int | None) -> list[str]:
    """A verdict read from fewer rounds than ran, because a side failed some restarts, says so (issue 44: a verdict
    from the restarts that ran, their count and the failures stated)."""
    out = []
    for e in table.entries:
        failed = sum(1 for r in e.restarts if not r.ok)
        if failed and not e.dropped:
            who = "the baseline" if e.is_baseline else e.label
            out.append(f"{who} failed {failed} of its {len(e.restarts)} verification restarts"
                       + (f" ({e.failure})" if e.failure else "")
                       + (f"; the verdict reads the {pairs} rounds both sides ran" if pairs is not None else ""))
    return out


def _drift_lines(table: VerificationTable) -> list[str]:
    """The machine's drift the study saw (issue 41): how far the baseline measured from its search restarts to its
    verification restarts. The baseline is not chosen for a lucky search value, so its move is the machine's level,
    where the winner's also carries the selection's luck; the rounds compare both sides at one time either way."""
    base = next((e for e in table.entries if e.is_baseline and e.search_mean and e.mean), None)
    if base is None or base.search_mean is None or base.mean is None:
        return []
    shift = base.mean / base.search_mean - 1.0
    text = (f"machine drift: the baseline measured {100 * abs(shift):.0f}% {'lower' if shift < 0 else 'higher'} in "
            f"verification than in the search ({base.search_mean:.0f} -> {base.mean:.0f} {base.unit})")
    moved = [f"{e.label} {100 * (e.mean / e.search_mean - 1.0):+.0f}%" for e in table.entries
             if not e.is_baseline and not e.dropped and e.search_mean and e.mean]
    if moved:
        who, it = ("the challenger", "it") if len(moved) == 1 else ("the challengers", "them")
        text += f", {who} {', '.join(moved)} (which also carries the search's luck in picking {it})"
    return [text + "; each round measures both sides minutes apart, so a move of the machine's level favours neither"]


def verification_lines(report: ReportView, winner: VerifiedRow, table: VerificationTable) -> list[str]:
    lines: list[str] = []
    width = max(len(e.label) for e in table.entries)
    what = "goodput" if report.objective == "goodput" else "throughput"
    levels = "" if not report.levels else f", load levels combined by {_aggregate_text(report)}"
    lines.append(f"{'':10}{'configuration':<{width}}  {what} (fresh interleaved restarts{levels})")
    for e in table.entries:
        is_winner = not report.no_result and (e is winner or e.label == winner.label)
        tag = "WINNER" if is_winner else ("baseline" if e.is_baseline else "")
        extra = "" if e.speedup is None else f"  {e.speedup.oneliner()}"
        text = e.describe().replace('95% CI', 'CI')
        if e.dropped and e.status == "ok" and e.mean is not None:
            # One restart has no spread: say what it was and why it stopped there.
            text = (f"{e.mean:.1f} {e.unit} (n={e.n}), dropped after round 1: the lowest geometric mean of its "
                    "search and round-1 restarts")
        if e.status != "ok":
            extra += f"  FAILED: {e.failure}"
        lines.append(f"{tag:<10}{e.label:<{width}}  {text}{extra}")
    n_family = len(table.entries)
    lines.append(f"(intervals hold jointly at 95% for these {n_family} configurations: each is a "
                 f"{100 - 5 / n_family:.2f}% interval, so picking the best does not shrink the winner's)")
    lines.append("")
    if report.no_result:
        lines.append(f"Verdict: NONE - {report.no_result}.")
    elif report.slo_outcome is not None and not report.slo_outcome.any_met:
        lines.append("Verdict: no configuration met the latency limits, the baseline included (below).")
    elif report.winner_is_baseline:
        lines.append("Verdict: no configuration beat the baseline - keep the engine defaults"
                     + _baseline_won(report, table) + ".")
    else:
        sp = winner.speedup
        speedup = float("nan") if sp is None else sp.speedup
        ci = "" if sp is None else sp.interval_text()
        lines.append(f"Verdict: {str(report.verdict).upper()} - winner is {speedup:.2f}x the baseline{ci}")
        lines += _failures_behind(table, sp.pairs if sp is not None else None)
        if table.sequential is not None:
            lines += sequential_lines(table.sequential)
        if table.no_sequential is not None:
            lines.append(table.no_sequential)
    if table.plan is not None:
        lines.append(table.plan.describe()
                     + (f"; extended {table.extension} time{'s' if table.extension != 1 else ''} by a resume with a "
                        "larger budget" if table.extension else ""))
    lines += _drift_lines(table)
    if winner.differences:
        lines.append("WARNING: the winner itself did not run as configured: " + "; ".join(winner.differences)
                     + ". Its throughput is what the engine resolved to; export it knowing that.")
    return lines


def _aggregate_text(report: ReportView) -> str:
    """``min over concurrency 1, 8, 32`` or ``mean (weights 1, 2, 1) over ...``, from the stored workload."""
    workload = report.meta.workload
    raw = workload.get("concurrency")
    levels = ", ".join(str(c) for c in (raw if isinstance(raw, list) else [raw]))
    weights = workload.get("weights")
    how = str(workload.get("aggregate"))
    if weights:
        how += f" (weights {', '.join(f'{w:g}' for w in weights)})"
    return f"{how} over concurrency {levels}"
