"""The report's load-level part: with ``workload.concurrency: [1, 8, 32]``, the best configuration at each level.

A study with load levels maximises one value per restart, the levels combined as ``workload.aggregate`` declares;
the configuration that wins that aggregate need not be the best at every level. :func:`level_bests` reads the
per-level figures every multi-level restart carries (:attr:`~autotune.core.records.RestartResult.levels`) and names,
for each level, the configuration with the highest mean value at that level under the study's objective (output
tok/s, or goodput in requests/s).

It reads the verification restarts when the study verified (fresh, interleaved restarts of the top configurations
and the baseline: the table the verdict comes from), else the search's. Either way it is the best of several
means, so it leans upward: it names where each configuration stands, and makes no claim of significance (the
verdict is about the aggregate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from autotune.core.records import OBJECTIVE_UNITS, RestartResult, Workload
from autotune.core.schedule import coverage_problems
from autotune.decisions.schedule import ScheduleVerdict, derive_schedule, schedule_verdict
from autotune.records import record

__all__ = ["LevelBest", "ScheduleNote", "level_bests", "render_levels", "schedule_note"]


@dataclasses.dataclass(frozen=True)
class LevelBest:
    """The best configuration at one load level.

    Attributes:
        concurrency: The load level (requests in flight).
        label: The best configuration there.
        value: Its mean value at this level over its counted restarts, in ``unit``.
        n: Counted restarts behind ``value``.
        unit: ``tok/s`` or ``req/s`` (goodput).
        source: ``verification`` or ``search`` (which restarts were read).
        winner_value: The study winner's mean at this level (``None`` when unknown).
        baseline_value: The baseline's mean at this level (``None`` when unknown).
    """

    concurrency: int
    label: str
    value: float
    n: int
    unit: str
    source: str
    winner_value: float | None = None
    baseline_value: float | None = None


def _means(objective: str, restarts: Iterable[RestartResult]) -> dict[int, tuple[float, int]]:
    scoring = Workload(objective=objective)  # one level's value is the workload's to define
    per_level: dict[int, list[float]] = {}
    for r in restarts:
        if not (r.ok and not r.cold):
            continue
        for level in r.levels:
            value = scoring.level_value(level.passes_tok_s, level.latency)
            if value is not None:
                per_level.setdefault(level.concurrency, []).append(float(value))
    return {c: (sum(v) / len(v), len(v)) for c, v in per_level.items()}


def level_bests(objective: str, configs: Sequence[tuple[str, Sequence[RestartResult]]], source: str,
                winner: str | None = None, baseline: str | None = None) -> tuple[LevelBest, ...]:
    """The best of ``configs`` (``(label, restarts)`` pairs) at every load level, in level order.

    ``winner`` and ``baseline`` are labels among ``configs`` whose per-level means are reported alongside.
    Empty when no restart carries load levels.
    """
    means = [(label, _means(objective, restarts)) for label, restarts in configs]
    levels = sorted({c for _, m in means for c in m})
    unit = OBJECTIVE_UNITS.get(objective, "tok/s")
    by_label = dict(means)
    out = []
    for c in levels:
        ranked = [(m[c][0], m[c][1], label) for label, m in means if c in m]
        value, n, label = max(ranked, key=lambda x: x[0])

        def at(name: str | None, c: int = c) -> float | None:
            found = by_label.get(name) if name is not None else None
            return None if not found or c not in found else found[c][0]

        out.append(LevelBest(c, label, value, n, unit, source, at(winner), at(baseline)))
    return tuple(out)


def render_levels(bests: Sequence[LevelBest]) -> list[str]:
    """Text lines: one per load level, its best configuration and where the winner and the baseline stand."""
    if not bests:
        return []
    digits = 1 if bests[0].unit == "tok/s" else 3
    lines = ["", f"Best configuration per load level (mean of the {bests[0].source} restarts at that level; the best "
                 "of several means leans upward, the verdict is about the aggregate):"]
    width = max(len(b.label) for b in bests)
    for b in bests:
        extra = ""
        if b.winner_value is not None:
            extra += f"  winner {b.winner_value:.{digits}f}"
        if b.baseline_value is not None:
            extra += f"  baseline {b.baseline_value:.{digits}f}"
        lines.append(f"  concurrency {b.concurrency:<5} {b.label:<{width}}  {b.value:.{digits}f} {b.unit} "
                     f"(n={b.n}){extra}")
    return lines


# -- the K schedule ----------------------------------------------------------------------------------------------


@record(leaves_out=("unit",))  # the report states the unit once
@dataclasses.dataclass(frozen=True)
class ScheduleNote:
    """With load levels: the K schedule the study derived (or why none) and how it fared in verification.

    Attributes:
        reason: What the levels' best K made (:class:`~autotune.decisions.schedule.Derivation`).
        verdict: The verified schedule against the best verified fixed K (``None``: none was verified).
        coverage: Where the schedule's resolved capture sizes miss a range's verification batch.
        unit: The values' unit.
    """

    reason: str | None
    verdict: ScheduleVerdict | None
    coverage: tuple[str, ...] = ()
    unit: str = "tok/s"

    def lines(self) -> list[str]:
        out = ["", "K schedule (draft tokens by batch size, one configuration verified beside the best fixed K):"]
        if self.reason:
            out.append(f"  {self.reason}")
        if self.verdict is not None:
            out += [f"  {line}" for line in self.verdict.lines(self.unit)]
        elif self.reason:
            out.append("  no schedule was verified, so none can win")
        out += [f"  capture sizes: {line}" for line in self.coverage]
        return out


def schedule_note(ledger: Any, verification: Any, objective: str, concurrency: Any) -> ScheduleNote | None:
    """The report's schedule part for a study with several load levels (``concurrency``, as the stored workload
    has it; ``None`` for one level)."""
    levels = [int(c) for c in concurrency] if isinstance(concurrency, (list, tuple)) else []
    if len(levels) < 2:
        return None
    unit = OBJECTIVE_UNITS.get(objective, "tok/s")
    candidates = ledger.verify_candidates() or []
    template = next((c.config for c in candidates if c.role != "baseline" and c.config.num_speculative_tokens
                     and c.config.k_schedule is None), None)
    evidence = [(config, ledger.restarts(t)) for t in ledger.measured_complete()
                if (config := ledger.config(t)) is not None]
    derivation = derive_schedule(levels, objective, evidence, template)
    verdict = None if verification is None else schedule_verdict(verification, objective)
    coverage: list[str] = []
    for entry in () if verification is None else verification.entries:
        schedule = entry.candidate.config.k_schedule
        resolved = next((r.resolved for r in entry.restarts if r.resolved is not None), None)
        if schedule is not None and resolved is not None:
            seqs = entry.candidate.config.engine_args.get("max_num_seqs")
            coverage += coverage_problems(schedule, resolved.cudagraph_capture_sizes,
                                          None if seqs is None else int(seqs))
    verified = any(c.config.k_schedule is not None for c in candidates)
    if template is None and verdict is None and not verified:
        return None
    reason = derivation.reason
    if derivation.schedule is not None and not verified and verification is not None:
        reason += " (not verified in this study: `schedule: off`, or the space could not run it)"
    return ScheduleNote(reason, verdict, tuple(coverage), unit)
