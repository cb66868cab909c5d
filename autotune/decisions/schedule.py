"""A K schedule from the load levels' best K, and its verdict against the best fixed K: pure rules.

A study with load levels (``workload.concurrency: [8, 32, 128]``) measures every configuration at each level; the K
that is best at 8 in flight need not be best at 128. :func:`derive_schedule` reads the search's per-level means and
builds the schedule that runs, up to each level, the K that was best there (among configurations of the best draft,
and without speculation), or says why it builds none: the levels agree on one K, or nothing was measured per level.
The study verifies that schedule as one more challenger, in the same interleaved, matched-seed rounds as the best
fixed-K configurations and the baseline (:mod:`autotune.study.schedule`). :func:`schedule_verdict` then compares the
verified schedule with the best verified fixed-K configuration, at the aggregate (an interval for the ratio) and at
each level (the means).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from autotune.records import record
from autotune.core.records import EngineConfig, RestartResult, Workload
from autotune.core.schedule import KSchedule
from autotune.stats.intervals import Comparison, Verdict, compare

__all__ = ["Derivation", "ScheduleVerdict", "derive_schedule", "level_means", "prefer_fixed_k", "schedule_verdict"]


@dataclasses.dataclass(frozen=True)
class Derivation:
    """What the levels' best K make: a schedule, or why none.

    Attributes:
        schedule: The derived schedule (``None``: none is made).
        best: Per level, ``(level, best K, its mean, the label of the configuration that had it)``.
        reason: One line for the report: what was derived, or why nothing was.
        template: The configuration whose draft and capture settings the schedule takes (``None``: none).
    """

    schedule: KSchedule | None
    best: tuple[tuple[int, int, float, str], ...] = ()
    reason: str = ""
    template: EngineConfig | None = None


def level_means(objective: str, restarts: Iterable[RestartResult]) -> dict[int, float]:
    """Mean value at each load level over the counted (warm, ok) restarts."""
    scoring = Workload(objective=objective)
    per: dict[int, list[float]] = {}
    for r in restarts:
        if r.ok and not r.cold:
            for lv in r.levels:
                value = scoring.level_value(lv.passes_tok_s, lv.latency)
                if value is not None:
                    per.setdefault(lv.concurrency, []).append(float(value))
    return {c: sum(v) / len(v) for c, v in per.items()}


def _draft_of(config: EngineConfig) -> str | None:
    return config.draft or config.spec_method


def derive_schedule(levels: Sequence[int], objective: str,
                    evidence: Sequence[tuple[EngineConfig, Sequence[RestartResult]]],
                    template: EngineConfig | None) -> Derivation:
    """The schedule of the levels' best K, with ``template``'s draft and capture settings.

    Args:
        levels: The study's load levels, ascending.
        objective: ``throughput`` or ``goodput`` (what a level's value is).
        evidence: Search configurations (fixed K; schedules are left out) with their restarts.
        template: The best fixed-K speculative configuration (its draft, capture mode and sizes, engine arguments);
            ``None`` when the study has none.
    """
    levels = sorted(int(c) for c in levels)
    if len(levels) < 2:
        return Derivation(None, reason="one load level: no schedule to derive")
    if template is None or not template.num_speculative_tokens:
        return Derivation(None, reason="no speculative configuration to take the draft and capture settings from")
    draft = _draft_of(template)
    best: list[tuple[int, int, float, str]] = []
    means = [(config, level_means(objective, restarts)) for config, restarts in evidence
             if config.k_schedule is None and (not config.num_speculative_tokens or _draft_of(config) == draft)]
    for level in levels:
        ranked = [(m[level], config) for config, m in means if level in m]
        if not ranked:
            return Derivation(None, reason=f"no restart measured load level {level}: no schedule to derive")
        value, config = max(ranked, key=lambda x: x[0])
        best.append((level, config.num_speculative_tokens, value, config.label()))
    ks = [k for _, k, _, _ in best]
    if len(set(ks)) == 1:
        return Derivation(None, tuple(best), f"the load levels agree on K={ks[0]} ({draft}): no schedule candidate",
                          template)
    schedule = KSchedule.from_levels(levels, ks)
    return Derivation(schedule, tuple(best), f"derived K={schedule.text()} ({draft}) from the levels' best K, with "
                      "the draft and capture settings of the best fixed-K configuration", template)


@record(renamed={"schedule_label": "schedule", "fixed_label": "fixed"})
@dataclasses.dataclass(frozen=True)
class ScheduleVerdict:
    """The verified schedule against the best verified fixed-K configuration.

    Attributes:
        schedule_label, fixed_label: The two configurations.
        comparison: The schedule's mean over the fixed one's at the aggregate, with its interval and verdict.
        levels: Per level, ``(level, schedule mean, fixed mean)``.
        won: The schedule is the verification's winner.
    """

    schedule_label: str
    fixed_label: str
    comparison: Comparison
    levels: tuple[tuple[int, float | None, float | None], ...]
    won: bool

    def lines(self, unit: str) -> list[str]:
        """Text for the report: the aggregate verdict and one line per level."""
        digits = 1 if unit == "tok/s" else 3
        c = self.comparison
        why = ""
        if not self.won and c.speedup > 1.0 and c.verdict != Verdict.FASTER:
            why = " (its lead is within the noise, so the fixed K wins)"
        head = (f"K schedule {self.schedule_label} vs best fixed K {self.fixed_label}: x{c.speedup:.3f} "
                f"[{c.ci_low:.3f}, {c.ci_high:.3f}] at the aggregate - {c.verdict}; the schedule "
                f"{'won' if self.won else 'did not win'} the verification{why}")
        out = [head]
        for level, s, f in self.levels:
            if s is None or f is None:
                continue
            better = "schedule" if s > f else "fixed K" if f > s else "tie"
            out.append(f"  concurrency {level:<5} schedule {s:.{digits}f}  fixed K {f:.{digits}f} {unit}  "
                       f"x{s / f:.3f} ({better})")
        return out


def schedule_verdict(verification: Any, objective: str, alpha: float = 0.05) -> ScheduleVerdict | None:
    """The schedule challenger of ``verification`` (a :class:`~autotune.decisions.verification.Verification`)
    against its best fixed-K configuration (the highest verified mean among the others, the baseline included);
    ``None`` without both."""
    # The baseline runs one K too (0: no speculation), so it is a fixed K the schedule must beat.
    usable = [e for e in verification.entries if not e.dropped and e.summary.status == "ok" and e.summary.values]
    schedules = [e for e in usable if e.candidate.config.k_schedule is not None]
    fixed = [e for e in usable if e.candidate.config.k_schedule is None]
    if not schedules or not fixed:
        return None
    sched = max(schedules, key=lambda e: e.summary.mean)
    best = max(fixed, key=lambda e: e.summary.mean)
    comparison = compare(sched.summary.values, best.summary.values, alpha=alpha)
    s_levels, f_levels = level_means(objective, sched.restarts), level_means(objective, best.restarts)
    levels = tuple((c, s_levels.get(c), f_levels.get(c)) for c in sorted(set(s_levels) | set(f_levels)))
    won = verification.winner.candidate.config.key() == sched.candidate.config.key()
    return ScheduleVerdict(sched.candidate.config.label(), best.candidate.config.label(), comparison, levels, won)


def prefer_fixed_k(entries: Sequence[Any], usable: Sequence[int], winner: int, alpha: float = 0.05) -> int:
    """The verification's winner, with a K schedule only where it is significantly faster than the best fixed K.

    ``entries`` are :class:`~autotune.decisions.verification.VerifiedConfig`; ``usable`` the indices that may win;
    ``winner`` the one with the highest mean. A schedule is a more demanding configuration (vLLM >= 0.26.0, graph
    coverage that dynamic K can cost), so a schedule whose lead over the best fixed-K challenger is within the noise
    gives the win to that challenger: where the levels agree on K in truth, a schedule derived from noisy per-level
    winners does not win. The baseline is left to the usual verdict (winner against baseline, with the sequential
    rounds that settle it), so a schedule well ahead of every fixed K goes on to be judged against it.
    """
    if winner not in usable or entries[winner].candidate.config.k_schedule is None:
        return winner
    fixed = [i for i in usable if entries[i].candidate.config.k_schedule is None
             and entries[i].candidate.role != "baseline"]
    if not fixed:
        return winner
    best = max(fixed, key=lambda i: entries[i].summary.mean)
    comparison = compare(entries[winner].summary.values, entries[best].summary.values, alpha=alpha)
    return winner if comparison.verdict == Verdict.FASTER else best
