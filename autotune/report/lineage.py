"""A study's lineage in the report: what ``tune --warm-start`` carried in, and every ``autotune recheck`` since.

Both are read from the study's record (the metadata's ``warm_start``, the ledger's rechecks) into a
:class:`Lineage`; :func:`render_recheck` is also what ``autotune recheck`` prints.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.records import decode
from autotune.decisions.recheck import CONFIG_CHANGED, ENGINES, RecheckRecord
from autotune.store.ledger import Ledger

__all__ = ["Lineage", "lineage_of", "render_lineage", "render_recheck"]


@dataclasses.dataclass(frozen=True)
class Lineage:
    """What the study started from and how its verdict held up since."""

    warm_start: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rechecks: tuple[RecheckRecord, ...] = ()


def lineage_of(ledger: Ledger) -> Lineage | None:
    """The study's lineage, ``None`` when it has neither a warm start nor a recheck."""
    warm = dict(ledger.meta().warm_start) if ledger.has_meta() else {}
    rechecks = tuple(decode(RecheckRecord, r) for r in ledger.rechecks())
    return Lineage(warm, rechecks) if warm or rechecks else None


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _speedup(fig: Mapping[str, Any]) -> str:
    if fig.get("speedup") is None:
        return "-"
    if fig.get("ci_low") is None:
        return f"x{_num(fig['speedup'], 2)} (no interval)"
    level = fig.get("confidence")
    at = f" ({level * 100:.1f}% CI)" if isinstance(level, (int, float)) else ""
    return f"x{_num(fig['speedup'], 2)} [{_num(fig['ci_low'], 2)}, {_num(fig['ci_high'], 2)}]{at}"


def render_recheck(record: RecheckRecord, unit: str = "tok/s") -> list[str]:
    """One recheck, side by side with the stored result: throughputs and speedups then and now, the verdict,
    what differs, and a changed resolved configuration as a loud warning."""
    lines = [f"Recheck {record.when} ({'two engines' if record.kind == ENGINES else 'winner against the baseline'}"
             f", {record.restarts_per_config} restarts per configuration: {record.planned_why})"]
    if record.kind == ENGINES:
        lines.append(f"  {'configuration':<58} {'now':>12}")
        for label, mean in record.now.get("means", {}).items():
            lines.append(f"  {label:<58} {_num(mean):>12} {unit} (n={record.now.get('n', {}).get(label, 0)})")
        lines.append(f"  speedup of the new engine: {_speedup(record.now)}")
        lines.append(f"  (the study's verdict: winner {_speedup(record.then)} over its baseline, {record.stored_verdict})")
    else:
        then_means, now_means = record.then.get("means", {}), record.now.get("means", {})
        lines.append(f"  {'configuration':<50} {'then':>12} {'now':>12}")
        for label in now_means:
            lines.append(f"  {label:<50} {_num(then_means.get(label)):>12} {_num(now_means.get(label)):>12} {unit}")
        lines.append(f"  speedup of {record.checked}: then {_speedup(record.then)} ({record.stored_verdict}), "
                     f"now {_speedup(record.now)} ({record.now.get('verdict')})")
    change = record.change_test
    if change is not None:
        rounds = f"{change.looks} look(s), rounds ended: {change.stopped}"
        if record.budget_minutes is not None:
            rounds += f", {record.minutes_used:.2f} of {record.budget_minutes:g} engine minutes"
        lines.append(f"  Change test ({(1 - change.alpha) * 100:.0f}% anytime-valid, margin +-{change.margin:.0%}; "
                     f"{rounds}): {change.describe()}")
    lines.append(f"  Verdict: {record.verdict.upper()}")
    if record.resolved_changes:
        lines.append(f"  WARNING: {CONFIG_CHANGED}: what the engine resolves is not what the study measured:")
        lines += [f"    ! {line}" for line in record.resolved_changes]
    if record.differences:
        lines.append("  Differs then -> now: " + "; ".join(record.differences))
    else:
        lines.append("  Differs then -> now: nothing the engine and the restarts report")
    return lines


def render_lineage(lineage: Lineage | None, unit: str = "tok/s") -> list[str]:
    """The report's lines: the warm start's sources, then the recheck history (the latest in full)."""
    if lineage is None:
        return []
    lines: list[str] = []
    sources: Sequence[Mapping[str, Any]] = lineage.warm_start.get("sources", ())
    if sources:
        lines += ["", f"Warm start: {lineage.warm_start.get('queued', 0)} configuration(s) queued from "
                  f"{len(sources)} earlier stud{'y' if len(sources) == 1 else 'ies'}, each measured again here:"]
        for s in sources:
            configs = ", ".join(s.get("configs", ())) or "none"
            lines.append(f"  from {s.get('study')}: {configs}; warm-up noise prior {s.get('noise')}"
                         + (f" ({s.get('noise_restarts')} restarts)" if s.get("noise_restarts") else "")
                         + (f"; start costs {s['start_costs']}" if s.get("start_costs") else ""))
            if s.get("differs"):
                lines.append("    differs: " + "; ".join(s["differs"]))
            for skipped in s.get("skipped", ()):
                lines.append(f"    left out: {skipped}")
    if lineage.rechecks:
        lines += ["", f"Rechecks ({len(lineage.rechecks)}; the verdict above is the study's own, never changed):"]
        for r in lineage.rechecks:
            change = r.change_test
            against = "" if change is None or change.ratio is None else (
                f"; x{change.ratio:.2f} [{_num(change.low, 2)}, {_num(change.high, 2)}] of the stored speedup")
            lines.append(f"  {r.when}  {r.kind:<8}  {r.verdict:<42} now {_speedup(r.now)}{against}")
        lines += ["", *render_recheck(lineage.rechecks[-1], unit)]
    return lines
