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
from autotune.core.facts import OUTPUT_AGREEMENT, OUTPUT_CHECK_SKIPPED, OUTPUT_DIGESTS
from autotune.decisions.outputs import DIFFERS, OutputCheck, check_outputs, reference_digests
from autotune.engines.vllm.vocabulary import lossy
from autotune.store import TrialRecord
from autotune.store.ledger import Ledger
from autotune.records import record

__all__ = ["OutputChecks", "output_checks", "render_outputs"]


@record(spread="check")
@dataclasses.dataclass(frozen=True)
class TrialOutputs:
    """One trial's check: its agreement, and whether it is flagged (or why no check ran)."""

    trial: int
    label: str
    check: OutputCheck
    skipped: str | None = None


@record(renamed={"threshold": "min_agreement"}, emits={"differ": "differing_trials"},
        after={"differ": "min_agreement"})
@dataclasses.dataclass(frozen=True)
class OutputChecks:
    """Every search trial's output check and the threshold they were judged by."""

    threshold: float
    trials: tuple[TrialOutputs, ...] = ()
    #: Why the verified winner's outputs were never compared with the baseline's, in a study whose engine checks
    #: outputs (``None``: they were, the check is off, or the winner is the baseline). Said, never silent.
    winner_unchecked: str | None = None

    @property
    def differ(self) -> tuple[TrialOutputs, ...]:
        return tuple(t for t in self.trials if t.check.differs)

    @property
    def differing_trials(self) -> tuple[int, ...]:
        return tuple(t.trial for t in self.differ)

    def agreement(self, trial: int) -> float | None:
        return next((t.check.agreement for t in self.trials if t.trial == trial), None)


def output_checks(ledger: Ledger, records: Sequence[TrialRecord], space: Any = None,
                  winner: str | None = None) -> OutputChecks | None:
    """The study's output checks; ``None`` when no restart ran or skipped the check (an engine without it).

    ``winner``: the verified winner's configuration key (``None``: none, or the baseline won); when the engine
    checked outputs (some restart reported them) but the winner's were never compared, :attr:`OutputChecks.
    winner_unchecked` says why (issue 32, principle 4: the output check applies or says why not)."""
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
        check = check_outputs(rec.restarts, reference, threshold, baseline=rec.config.key() == key,
                              lossy=lossy(rec.config))
        skipped = next((str(r.facts[OUTPUT_CHECK_SKIPPED]) for r in rec.restarts
                        if OUTPUT_CHECK_SKIPPED in r.facts), None)
        if check.agreement is not None or skipped or check.unchecked_lossy:
            out.append(TrialOutputs(rec.number, rec.config.label(), check, skipped))
    unchecked = _unchecked(records, reference, threshold, winner, {t.trial: t for t in out})
    return OutputChecks(threshold, tuple(out), unchecked) if out or unchecked else None


def _unchecked(records: Sequence[TrialRecord], reference: dict[int, str], threshold: float, winner: str | None,
               checked: dict[int, TrialOutputs]) -> str | None:
    """Why the winner's outputs were not compared, when the engine checks outputs; ``None`` when they were."""
    if winner is None or threshold <= 0 or not any(OUTPUT_DIGESTS in r.facts for rec in records
                                                   for r in rec.restarts):
        return None  # no winner to judge, the check turned off, or an engine without outputs (the simulator)
    mine = [rec for rec in records if rec.config.key() == winner and rec.duplicate_of is None]
    if any(rec.number in checked and checked[rec.number].check.agreement is not None for rec in mine):
        return None
    skipped = next((checked[rec.number].skipped for rec in mine if rec.number in checked), None)
    if skipped:
        return f"the check was skipped for it ({skipped})"
    if not reference:
        return "the baseline reported no outputs to compare with"
    if not any(OUTPUT_DIGESTS in r.facts for rec in mine for r in rec.restarts if r.ok):
        return "its restarts reported no outputs for the checked prompts"
    return "its outputs answered none of the prompts the baseline's did"


def render_outputs(checks: OutputChecks | None) -> list[str]:
    """The report's lines: the flagged configurations, each with its agreement."""
    if checks is None:
        return []
    lines = []
    if checks.winner_unchecked:
        lines += ["", f"WARNING: the output check did not apply to the winner: {checks.winner_unchecked}; its "
                      "outputs were never compared with the baseline's, so they may differ"]
    if not checks.differ:
        return lines
    lines += ["", f"Outputs differ from the baseline ({OUTPUT_AGREEMENT} below {checks.threshold:.0%} on the checked "
                 "prompts, greedy): these could not win:"]
    for t in checks.differ:
        if t.check.agreement is None:  # (lossy, never compared)
            lines.append(f"  ! trial {t.trial} {t.label}: a lossy rejection method (fly) changes outputs by design, "
                         "and the output check never compared them: it cannot win without the check")
        else:
            lines.append(f"  ! trial {t.trial} {t.label}: {DIFFERS} ({t.check.agreement:.0%} of prompts agree)")
    return lines


def trial_output_check(ledger: Ledger, record: TrialRecord) -> OutputCheck | None:
    """One trial's check as its MLflow run shows it (``None``: nothing compared yet)."""
    checks = output_checks(ledger, [*(r for r in ledger.trial_records() if r.number != record.number), record])
    return next((t.check for t in checks.trials if t.trial == record.number), None) if checks else None
