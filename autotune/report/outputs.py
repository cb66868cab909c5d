"""The output check in the report: each trial's agreement with the baseline's outputs, and who was flagged.

A flagged configuration (``outputs differ from the baseline``) could not win: the study left it out of the
verification candidates and the winner (:mod:`autotune.decisions.outputs`). The report recomputes every trial's
agreement from the digests its restarts stored, so a study read later says the same as the study that ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from autotune.config.output_check import min_agreement, min_agreement_from_yaml
from autotune.core.facts import OUTPUT_AGREEMENT, OUTPUT_CHECK_SKIPPED
from autotune.decisions.outputs import DIFFERS, OutputCheck, check_outputs, reference_digests
from autotune.store import TrialRecord
from autotune.store.ledger import Ledger

__all__ = ["OutputChecks", "output_checks", "render_outputs"]


@dataclasses.dataclass(frozen=True)
class TrialOutputs:
    """One trial's check: its agreement, and whether it is flagged (or why no check ran)."""

    trial: int
    label: str
    check: OutputCheck
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "label": self.label, **self.check.to_dict(), "skipped": self.skipped}


@dataclasses.dataclass(frozen=True)
class OutputChecks:
    """Every search trial's output check and the threshold they were judged by."""

    threshold: float
    trials: tuple[TrialOutputs, ...] = ()

    @property
    def differ(self) -> tuple[TrialOutputs, ...]:
        return tuple(t for t in self.trials if t.check.differs)

    def agreement(self, trial: int) -> float | None:
        return next((t.check.agreement for t in self.trials if t.trial == trial), None)

    def to_dict(self) -> dict[str, Any]:
        return {"min_agreement": self.threshold, "differ": [t.trial for t in self.differ],
                "trials": [t.to_dict() for t in self.trials]}


def output_checks(ledger: Ledger, records: Sequence[TrialRecord], space: Any = None) -> OutputChecks | None:
    """The study's output checks; ``None`` when no restart ran or skipped the check (an engine without it)."""
    if not any(r.facts for rec in records for r in rec.restarts):
        return None
    threshold = min_agreement(space) if space is not None else min_agreement_from_yaml(ledger.space_yaml())
    baseline = ledger.meta().baseline
    key = None if baseline is None else baseline.key()
    reference = reference_digests(r for rec in sorted(records, key=lambda rec: rec.number)
                                  if rec.config.key() == key for r in rec.restarts)
    out = []
    for rec in records:
        if rec.duplicate_of is not None:
            continue
        check = check_outputs(rec.restarts, reference, threshold, baseline=rec.config.key() == key)
        skipped = next((str(r.facts[OUTPUT_CHECK_SKIPPED]) for r in rec.restarts
                        if OUTPUT_CHECK_SKIPPED in r.facts), None)
        if check.agreement is not None or skipped:
            out.append(TrialOutputs(rec.number, rec.config.label(), check, skipped))
    return OutputChecks(threshold, tuple(out)) if out else None


def render_outputs(checks: OutputChecks | None) -> list[str]:
    """The report's lines: the flagged configurations, each with its agreement."""
    if checks is None or not checks.differ:
        return []
    lines = ["", f"Outputs differ from the baseline ({OUTPUT_AGREEMENT} below {checks.threshold:.0%} on the checked "
                 "prompts, greedy): these could not win:"]
    for t in checks.differ:
        lines.append(f"  ! trial {t.trial} {t.label}: {DIFFERS} ({t.check.agreement:.0%} of prompts agree)")
    return lines


def trial_output_check(ledger: Ledger, record: TrialRecord) -> OutputCheck | None:
    """One trial's check as its MLflow run shows it (``None``: nothing compared yet)."""
    checks = output_checks(ledger, [*(r for r in ledger.trial_records() if r.number != record.number), record])
    return next((t.check for t in checks.trials if t.trial == record.number), None) if checks else None
