"""The report: a table a person reads in ten seconds, and the same facts as JSON.

The typed :class:`Report` (built once from a study's ledger by :func:`~autotune.report._build.build_report`, or read
back from its JSON file) and its text, :func:`render_report`; everything that shows a result (the table,
``--json``, export, plots, MLflow, the benchmark) reads that object by attribute. Winner, baseline, speedup with its
interval and verdict come first; then every configured-vs-resolved warning (the trap this tool exists for),
failures, and the budget spent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.records import encode, record
from autotune.core.records import OBJECTIVE_UNITS, RestartResult
from autotune.report._rows import CompareResult, RestartRow, VerificationTable, VerifiedRow, finite_or_none
from autotune.report._counts import FailedTrial, TrialCounts
from autotune.report._machine import MachineNotes, render_machine
from autotune.report._simcheck import SimulatorCheck, simulator_check
from autotune.report._verification_text import verification_lines
from autotune.report.latency import Prompts, SloOutcome, TrialLatency, render_latency
from autotune.report.levels import LevelBest, ScheduleNote, render_levels
from autotune.report.lineage import Lineage, render_lineage
from autotune.report.outputs import OutputChecks, render_outputs
from autotune.report.phases import PhaseTotals, render_phases
from autotune.stats.intervals import TrialSummary
from autotune.store.ledger import SearchEnd, StudyMeta, TrialRecord

__all__ = [
    "Budget",
    "ChangedConfig",
    "CompareResult",
    "FailedTrial",
    "Report",
    "SearchBest",
    "SearchTrial",
    "SimulatorCheck",
    "TrialCounts",
    "VerifiedRow",
    "render_report",
    "simulator_check",
]

#: Warnings and failures the table lists before pointing at ``--json``.
_SHOWN_WARNINGS, _SHOWN_FAILURES = 8, 5


def _counted_cold_seeds(restarts: Sequence[RestartResult], summary: TrialSummary | None) -> frozenset[int]:
    """Seeds of the trial's cold starts that counted (the study found its cold starts no different from warm
    ones): a counted seed with no warm restart of its own."""
    if summary is None:
        return frozenset()
    warm = {r.seed for r in restarts if r.ok and not r.cold}
    return frozenset(seed for seed in summary.seeds if seed not in warm)


#: A search trial as report --json lists it, every figure read from its stored record.
@record(leaves_out=("record",), emits={
    "trial": "record.number", "state": "record.state", "label": "record.config.label", "params": "record.config.params",
    "config": "record.config", "value": "value", "summary": "record.summary", "resolved": "resolved",
    "differences": "differences", "reason": "record.reason", "duplicate_of": "record.duplicate_of",
    "interrupted": "record.interrupted", "restarts": "restart_rows"})
@dataclasses.dataclass(frozen=True)
class SearchTrial:
    """One search trial as ``report --json`` shows it: configuration, what the engine resolved, every restart.

    A repeat of an earlier configuration (``duplicate_of``) ran nothing; a trial cut short by an interruption
    (``interrupted``) keeps the restarts it finished.
    """

    record: TrialRecord

    @property
    def duplicate_of(self) -> int | None:
        return self.record.duplicate_of

    @property
    def value(self) -> float | None:
        return finite_or_none(self.record.value)

    @property
    def resolved(self) -> dict[str, Any] | None:
        """What the engine ran, as its summary says (``None`` without one)."""
        s = self.record.summary
        return None if s is None else {
            "cudagraph_mode": s.resolved_mode,
            "cudagraph_capture_sizes": None if s.resolved_sizes is None else list(s.resolved_sizes)}

    @property
    def differences(self) -> tuple[str, ...]:
        s = self.record.summary
        return () if s is None else tuple(s.differences)

    @property
    def restart_rows(self) -> tuple[RestartRow, ...]:
        seeds = _counted_cold_seeds(self.record.restarts, self.record.summary)
        return tuple(RestartRow.of(x, seeds) for x in self.record.restarts)


@record(omit_at_default=("phase",))
@dataclasses.dataclass(frozen=True)
class ChangedConfig:
    """A configuration the engine changed silently: where (a trial, or verification) and how."""

    trial: int | None
    label: str
    differences: tuple[str, ...]
    phase: str | None = None


@record(omit_at_default=("verification_restarts",))
@dataclasses.dataclass(frozen=True)
class Budget:
    """Engine starts and minutes spent, the limits set, and verification's share."""

    restarts_used: int
    minutes_used: float
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    verification_restarts: int | None = None


@dataclasses.dataclass(frozen=True)
class SearchBest:
    """The search's best mean: unverified, and biased upwards by selection."""

    trial: int
    label: str | None
    mean: float


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything a person (or a script) needs to judge a study."""

    study: str
    meta: StudyMeta
    trials: TrialCounts
    warnings: tuple[ChangedConfig, ...]
    failures: tuple[FailedTrial, ...]
    budget: Budget
    search_stopped: str | None = None
    search_best: SearchBest | None = None
    verification: VerificationTable | None = None
    winner: VerifiedRow | None = None
    baseline: VerifiedRow | None = None
    verdict: str | None = None
    simulator_check: SimulatorCheck | None = None
    prompts: Prompts | None = None
    objective: str = "throughput"
    slo: Mapping[str, float] = dataclasses.field(default_factory=dict)
    search_latency: tuple[TrialLatency, ...] = ()
    slo_outcome: SloOutcome | None = None
    #: Every search trial that got a configuration, in trial order.
    search_trials: tuple[SearchTrial, ...] = ()
    #: Why the study has nothing to claim (see :func:`no_result_reason`); ``None`` when it has a result.
    no_result: str | None = None
    #: With load levels: the best configuration at each level (:mod:`autotune.report.levels`).
    levels: tuple[LevelBest, ...] = ()
    #: With load levels: the K schedule derived (or why none) and its verdict against the best fixed K.
    schedule: ScheduleNote | None = None
    #: What the study's own test said about cold starts (:class:`~autotune.stats.coldstart.ColdVerdict`), when it ran.
    cold_starts: str | None = None
    #: Memory guard trips, settle waits, machine-state departures, KV audits (:mod:`autotune.report._machine`).
    machine: MachineNotes | None = None
    #: Where the engine time went, by phase (:mod:`autotune.report.phases`); ``None`` when no restart said.
    phases: PhaseTotals | None = None
    #: Each trial's agreement with the baseline's outputs (:mod:`autotune.report.outputs`); ``None``: no check ran.
    output_checks: OutputChecks | None = None
    #: Search trials cut short and queued again (not failures): the header's ``interrupted`` count.
    interrupted: tuple[FailedTrial, ...] = ()
    #: Why the search ended, with the numbers (``None``: still running, or a study from before it was stored).
    search_end: SearchEnd | None = None
    lineage: Lineage | None = None  # what --warm-start carried in, every recheck since (report/lineage.py)

    @property
    def unit(self) -> str:
        """The unit of every value in the report: ``tok/s``, or ``req/s`` for goodput."""
        return OBJECTIVE_UNITS.get(self.objective, "tok/s")

    @property
    def winner_is_baseline(self) -> bool:
        return self.winner is not None and self.winner.is_baseline

    def render(self) -> str:
        """The ten-second table."""
        return render_report(self)

    def to_json(self) -> dict[str, Any]:
        """The same facts as a JSON-ready dict (``report --json``, ``report.json`` in MLflow)."""
        out: dict[str, Any] = {
            "study": self.study,
            "meta": encode(self.meta),
            "trials": dataclasses.asdict(self.trials),
            "warnings": [encode(w) for w in self.warnings],
            "failures": [dataclasses.asdict(f) for f in self.failures],
            "interrupted": [dataclasses.asdict(f) for f in self.interrupted],
            "budget": encode(self.budget),
            "search_stopped": self.search_stopped,
            "search_end": None if self.search_end is None else {**encode(self.search_end),
                                                                "text": self.search_end.describe()},
            "cold_starts": self.cold_starts,
            "verification": None if self.verification is None else encode(self.verification),
            "winner": None if self.winner is None else encode(self.winner),
            "baseline": None if self.baseline is None else encode(self.baseline),
        }
        if self.search_best is not None:
            out["search_best"] = dataclasses.asdict(self.search_best)
        if self.verification is not None:
            out["verdict"] = self.verdict
            out["winner_is_baseline"] = self.winner_is_baseline
        if self.simulator_check is not None:
            out["simulator_check"] = dataclasses.asdict(self.simulator_check)
        out["prompts"] = None if self.prompts is None else encode(self.prompts)
        out["objective"] = self.objective
        out["unit"] = self.unit
        out["levels"] = [encode(b) for b in self.levels]
        out["schedule"] = None if self.schedule is None else encode(self.schedule)
        out["slo"] = dict(self.slo)
        out["search_latency"] = [encode(t) for t in self.search_latency]
        if self.slo_outcome is not None:
            out["slo_outcome"] = encode(self.slo_outcome)
        out["no_result"] = self.no_result
        out["search_trials"] = [encode(t) for t in self.search_trials]
        out["machine"] = None if self.machine is None else encode(self.machine)
        out["phases"] = None if self.phases is None else encode(self.phases)
        out["output_check"] = None if self.output_checks is None else encode(self.output_checks)
        out["lineage"] = None if self.lineage is None else encode(self.lineage)
        return out


# -- rendering -------------------------------------------------------------------------------------------


def render_report(report: Report) -> str:
    """The ten-second table."""
    lines: list[str] = []
    meta, engine = report.meta, report.meta.engine
    lines.append(f"Study {report.study}  |  space {meta.space_name}  |  engine {engine.name}"
                 f" {engine.version or ''}  |  model {meta.model}")
    t, b = report.trials, report.budget
    lines.append(f"Trials: {t.complete} complete, "
                 + (f"{t.screened} screened on their cold start, " if t.screened else "")
                 + f"{t.pruned} raced out, {t.fail} failed"
                 + (f", {t.interrupted} interrupted" if t.interrupted else "")
                 + f"  |  engine starts {b.restarts_used}"
                 + (f" of {b.budget_restarts}" if b.budget_restarts else "")
                 + f", {b.minutes_used:.1f} engine-minutes"
                 + (" (simulated)" if engine.simulated else "")
                 + (f" (verification: {b.verification_restarts} starts)" if b.verification_restarts is not None
                    else ""))
    if report.search_end is not None:
        lines.append(f"Search ended: {report.search_end.describe()}.")
    elif report.search_stopped:
        lines.append(f"Search stopped early: {report.search_stopped}.")
    if report.cold_starts:
        lines.append(f"{report.cold_starts}.")
    lines += render_phases(report.phases)
    lines.append("")
    winner, table = report.winner, report.verification
    if (winner is None or table is None) and report.no_result:
        lines.append(f"Nothing to report: {report.no_result}.")
    elif winner is None or table is None:
        lines.append("No verification yet: run `autotune tune` again to finish the study.")
        if report.search_best is not None:
            sb = report.search_best
            lines.append(f"Search best so far (unverified, biased upwards): trial {sb.trial} {sb.label} "
                         f"{sb.mean:.{1 if report.unit == 'tok/s' else 3}f} {report.unit}")
    else:
        lines += verification_lines(report, winner, table)
    lines += render_levels(report.levels) + ([] if report.schedule is None else report.schedule.lines())
    lines += render_latency(report)
    lines += render_machine(report.machine)
    lines += render_outputs(report.output_checks)
    if report.warnings:
        lines.append("")
        lines.append(f"WARNING: the engine silently changed the configuration in {len(report.warnings)} "
                     "configuration(s):")
        for w in report.warnings[:_SHOWN_WARNINGS]:
            where = f"trial {w.trial}" if w.trial is not None else "verification"
            lines.append(f"  ! {where} {w.label}: " + "; ".join(w.differences))
        if len(report.warnings) > _SHOWN_WARNINGS:
            lines.append(f"  ... and {len(report.warnings) - _SHOWN_WARNINGS} more (--json for all)")
    if report.failures:
        lines.append("")
        lines.append(f"Failed trials ({len(report.failures)}):")
        for f in report.failures[:_SHOWN_FAILURES]:
            lines.append(f"  x trial {f.trial} {f.label}: {f.reason}")
        if len(report.failures) > _SHOWN_FAILURES:
            lines.append(f"  ... and {len(report.failures) - _SHOWN_FAILURES} more (--json for all)")
    if report.interrupted:
        lines.append("")
        lines.append(f"Interrupted trials ({len(report.interrupted)}, cut short; each says what became of its "
                     "configuration):")
        lines += [f"  ~ trial {f.trial} {f.label}: {f.reason}" for f in report.interrupted[:_SHOWN_FAILURES]]
        if len(report.interrupted) > _SHOWN_FAILURES:
            lines.append(f"  ... and {len(report.interrupted) - _SHOWN_FAILURES} more (--json for all)")
    duplicates = [t.record for t in report.search_trials if t.duplicate_of is not None]
    if duplicates:
        lines.append("")
        lines.append(f"Repeated suggestions ({len(duplicates)}, nothing run, not counted as trials: each was told its "
                     "original's result):")
        for r in duplicates[:_SHOWN_FAILURES]:
            lines.append(f"  = trial {r.number} {r.config.label()}: same configuration as trial {r.duplicate_of}")
        if len(duplicates) > _SHOWN_FAILURES:
            lines.append(f"  ... and {len(duplicates) - _SHOWN_FAILURES} more (--json for all)")
    lines += render_lineage(report.lineage, report.unit)
    if report.simulator_check is not None:
        sc = report.simulator_check
        lines.append("")
        what, digits = ("goodput", 3) if report.objective == "goodput" else ("throughput", 1)
        lines.append(f"Simulator ground truth (sim engine only): winner's true {what} is "
                     f"{sc.winner_true:.{digits}f} {report.unit} = {sc.ratio_to_best * 100:.1f}% of the best "
                     f"configuration in the space{' meeting the SLOs' if sc.under_slo else ''} "
                     f"({sc.best_true:.{digits}f} {report.unit}, "
                     f"{sc.best_label})"
                     + ("; the winner's true latency misses them." if sc.under_slo and not sc.winner_meets_slo
                        else "."))
    return "\n".join(lines)
