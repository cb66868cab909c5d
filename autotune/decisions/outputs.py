"""The output check's rule: a configuration whose greedy outputs differ from the baseline's cannot win.

Pure functions over restarts (:mod:`autotune.core.outputs` says what a restart records). The baseline's reference
is its first restart that ran the check; a configuration's agreement is the lowest over its own checked restarts
(one restart of garbage is enough to disqualify it), and it is flagged below the space's threshold. The baseline is
the reference and never flagged: its own agreement, from its other restarts, shows how far ties alone move outputs.
A configuration verified by a lossy rejection method (vLLM's ``fly``) is flagged unless its outputs were compared and
agreed: without the check (turned off, skipped, an engine without outputs) it cannot win.
Like a latency limit, the flag is an Optuna constraint (:func:`constraint_value`, feasible at <= 0), so the sampler
learns it and racing's incumbent, the verification candidates and the winner all leave flagged configurations out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from autotune.core.facts import OUTPUT_AGREEMENT, OUTPUT_DIGESTS
from autotune.core.outputs import agreement, parse_digests
from autotune.core.records import RestartResult
from autotune.records import record

__all__ = ["CONSTRAINT", "DIFFERS", "OutputCheck", "check_outputs", "constraint_value", "reference_digests"]

#: The Optuna constraint's name (one per study; ``Trial.set_constraint``).
CONSTRAINT = OUTPUT_AGREEMENT
#: What the report says of a flagged configuration.
DIFFERS = "outputs differ from the baseline"


#: Written as the agreement (under its fact's name), the threshold and whether it differs; a lossy method nothing
#: checked says so.
@record(renamed={"agreement": OUTPUT_AGREEMENT}, leaves_out=("baseline", "referenced", "lossy"),
        emits={"differs": "differs", "lossy_unchecked": "unchecked_lossy"}, omit_at_default=("lossy_unchecked",))
@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """One configuration's agreement with the baseline.

    Attributes:
        agreement: The lowest fraction of checked prompts agreeing over its checked restarts; ``None`` when
            nothing could be compared (no check ran, or the baseline has no reference yet).
        threshold: The lowest agreement that may win (``output_check.min_agreement``; 0 turns the check off).
        baseline: Whether this is the baseline itself (the reference, never flagged).
        referenced: Whether the study has the baseline's reference outputs yet (the check is live in the study).
    """

    agreement: float | None
    threshold: float
    baseline: bool = False
    referenced: bool = False
    #: A lossy rejection method (``fly``) verifies its drafts: its outputs may differ by design.
    lossy: bool = False

    @property
    def unchecked_lossy(self) -> bool:
        """Lossy, and nothing compared its outputs with the baseline's (the check off, skipped, or no outputs)."""
        return self.lossy and not self.baseline and (self.threshold <= 0 or self.agreement is None)

    @property
    def differs(self) -> bool:
        """Below the threshold, or lossy and never checked: flagged, and it cannot win."""
        if self.unchecked_lossy:
            return True
        return (not self.baseline and self.threshold > 0 and self.agreement is not None
                and self.agreement < self.threshold)


def reference_digests(baseline_restarts: Iterable[RestartResult]) -> dict[int, str]:
    """The baseline's checked outputs: its first restart that ran the check (empty when none has)."""
    for r in baseline_restarts:
        digests = parse_digests(r.facts.get(OUTPUT_DIGESTS)) if r.ok else {}
        if digests:
            return digests
    return {}


def check_outputs(restarts: Sequence[RestartResult], reference: dict[int, str], threshold: float,
                  baseline: bool = False, lossy: bool = False) -> OutputCheck:
    """A configuration's :class:`OutputCheck` from its restarts and the baseline's :func:`reference_digests`."""
    values = []
    for r in restarts:
        digests = parse_digests(r.facts.get(OUTPUT_DIGESTS)) if r.ok else {}
        value = agreement(digests, reference) if digests and reference else None
        if value is not None:
            values.append(value)
    return OutputCheck(min(values) if values else None, threshold, baseline, referenced=bool(reference), lossy=lossy)


def constraint_value(check: OutputCheck) -> float | None:
    """Optuna's constraint for the check (feasible at <= 0): the shortfall below the threshold; ``0`` when nothing was
    compared while the check is live; ``None`` while it is not (off, or no baseline reference yet)."""
    if check.threshold <= 0 or not check.referenced:
        return None
    if check.unchecked_lossy:
        return check.threshold  # lossy and never compared: as far below the threshold as nothing agreeing
    if check.agreement is None or check.baseline:
        # Once the check is live every trial carries the constraint, 0 (feasible) where nothing was compared
        # (the baseline itself, a configuration whose check is skipped): Optuna's GPSampler refuses trials whose
        # constraint names differ, and TPE reads 0 as no constraint at all.
        return 0.0
    return check.threshold - check.agreement
