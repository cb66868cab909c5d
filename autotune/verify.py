"""Verification: the best configurations and the baseline, measured again in fresh interleaved restarts.

The search's best mean is biased upwards: among many noisy trials the luckiest looks best. So the top
configurations are measured again, on fresh seeds, interleaved with the baseline (A B C base A B C base ...)
so that drift over time hits every configuration alike. The winner is chosen from these restarts alone,
and its speedup over the baseline comes with a Bonferroni-corrected interval and a verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.measure import Comparison, TrialSummary, Verdict, compare, measure_restart, summarize
from autotune.records import EngineConfig, RestartResult, Workload

__all__ = ["Candidate", "VerifiedConfig", "Verification", "run_verification"]

BASELINE = "baseline"
CANDIDATE = "candidate"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A configuration chosen for verification (the baseline has ``trial_number=None`` when never searched)."""

    role: str
    config: EngineConfig
    trial_number: int | None = None
    search_mean: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "config": self.config.to_dict(), "trial_number": self.trial_number,
                "search_mean": self.search_mean}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(data["role"], EngineConfig.from_dict(data["config"]), data.get("trial_number"),
                   data.get("search_mean"))


@dataclasses.dataclass(frozen=True)
class VerifiedConfig:
    """One verified configuration: its fresh restarts, their summary, and its comparison with the baseline."""

    candidate: Candidate
    restarts: tuple[RestartResult, ...]
    summary: TrialSummary
    comparison: Comparison | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.to_dict(),
            "label": self.candidate.config.label(),
            "restarts": [r.to_dict() for r in self.restarts],
            "summary": self.summary.to_dict(),
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifiedConfig:
        return cls(
            Candidate.from_dict(data["candidate"]),
            tuple(RestartResult.from_dict(r) for r in data["restarts"]),
            TrialSummary.from_dict(data["summary"]),
            None if data.get("comparison") is None else Comparison.from_dict(data["comparison"]),
        )


@dataclasses.dataclass(frozen=True)
class Verification:
    """The outcome of the verification phase.

    Attributes:
        entries: Candidates in search order, the baseline last.
        winner_index: Index into ``entries`` of the configuration with the highest verified mean.
        restarts_per_config: Counted restarts each configuration was given.
        restarts_used: Engine starts the phase cost (cold warm-ups and failures included).
        minutes_used: Engine wall time the phase cost.
    """

    entries: tuple[VerifiedConfig, ...]
    winner_index: int
    restarts_per_config: int
    restarts_used: int
    minutes_used: float

    @property
    def winner(self) -> VerifiedConfig:
        return self.entries[self.winner_index]

    @property
    def baseline(self) -> VerifiedConfig:
        return next(e for e in self.entries if e.candidate.role == BASELINE)

    @property
    def verdict(self) -> str:
        """``faster`` / ``no significant difference`` / ``slower`` for the winner against the baseline."""
        if self.winner.candidate.role == BASELINE or self.winner.comparison is None:
            return Verdict.NOT_SIGNIFICANT
        return self.winner.comparison.verdict

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": [e.to_dict() for e in self.entries],
            "winner_index": self.winner_index,
            "restarts_per_config": self.restarts_per_config,
            "restarts_used": self.restarts_used,
            "minutes_used": self.minutes_used,
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verification:
        return cls(
            tuple(VerifiedConfig.from_dict(e) for e in data["entries"]),
            int(data["winner_index"]),
            int(data["restarts_per_config"]),
            int(data["restarts_used"]),
            float(data["minutes_used"]),
        )


ProgressFn = Callable[[str, Mapping[str, list[dict[str, Any]]]], None]


def run_verification(
    engine: Any,
    workload: Workload,
    candidates: Sequence[Candidate],
    restarts: int,
    seed_for: Callable[[int], int],
    done: Mapping[str, list[dict[str, Any]]] | None = None,
    on_result: Callable[[Candidate, RestartResult], None] | None = None,
    save_progress: Callable[[Mapping[str, list[dict[str, Any]]]], None] | None = None,
    confidence: float = 0.95,
    interval_method: str = "t",
    alpha: float = 0.05,
) -> Verification:
    """Measure ``candidates`` (the baseline among them) in ``restarts`` interleaved rounds of fresh restarts.

    Args:
        engine: The engine backend.
        workload: The workload.
        candidates: Configurations to verify; exactly one has role ``baseline``.
        restarts: Counted restarts per configuration.
        seed_for: Seed of round ``i``; the same for every configuration in a round (matched restarts).
        done: Restarts already run in an earlier, interrupted attempt: ``config key -> [RestartResult dicts]``.
        on_result: Called after every restart.
        save_progress: Called with the updated ``done`` after every restart, so an interruption loses nothing.
        confidence: Interval coverage for each configuration's mean.
        interval_method: ``t`` or ``bca``.
        alpha: Family-wise error rate of the comparisons with the baseline.
    """
    progress: dict[str, list[dict[str, Any]]] = {k: list(v) for k, v in (done or {}).items()}
    for rnd in range(restarts):
        for cand in candidates:
            key = cand.config.key()
            have = [RestartResult.from_dict(d) for d in progress.get(key, [])]
            counted = [r for r in have if not (r.ok and r.cold)]
            if len(counted) > rnd or any(not r.ok for r in have):
                continue  # already measured this round, or failed earlier: a broken config gets no more starts

            def record(result: RestartResult, cand: Candidate = cand, key: str = key) -> None:
                progress.setdefault(key, []).append(result.to_dict())
                if save_progress is not None:
                    save_progress(progress)
                if on_result is not None:
                    on_result(cand, result)

            measure_restart(engine, cand.config, workload, restart=rnd, seed=seed_for(rnd), on_result=record)
    return _conclude(candidates, progress, restarts, confidence, interval_method, alpha)


def _conclude(
    candidates: Sequence[Candidate],
    progress: Mapping[str, list[dict[str, Any]]],
    restarts: int,
    confidence: float,
    interval_method: str,
    alpha: float,
) -> Verification:
    per_key = {c.config.key(): tuple(RestartResult.from_dict(d) for d in progress.get(c.config.key(), []))
               for c in candidates}
    # The winner is the highest of several means, so its own 95% interval would cover its true mean less than
    # 95% of the time. Intervals at the Bonferroni level over the family cover every member at once, the
    # winner included (docs/benchmarks.md: coverage rose from 92-94% to 96-99% on the simulator).
    family = 1.0 - (1.0 - confidence) / max(1, len(candidates))
    summaries = {c.config.key(): summarize(c.config, per_key[c.config.key()], family, interval_method)
                 for c in candidates}
    base = next(c for c in candidates if c.role == BASELINE)
    base_summary = summaries[base.config.key()]
    challengers = [c for c in candidates if c.role != BASELINE]
    entries = []
    for cand in challengers + [base]:
        s = summaries[cand.config.key()]
        comparison = None
        if cand.role != BASELINE and s.status == "ok" and base_summary.status == "ok" and s.values:
            comparison = compare(s.values, base_summary.values, alpha=alpha, comparisons=max(1, len(challengers)))
        entries.append(VerifiedConfig(cand, per_key[cand.config.key()], s, comparison))
    usable = [i for i, e in enumerate(entries) if e.summary.status == "ok" and e.summary.values]
    winner = max(usable, key=lambda i: entries[i].summary.mean) if usable else len(entries) - 1
    all_restarts = [r for rs in per_key.values() for r in rs]
    minutes = sum((r.wall_s or 0.0) for r in all_restarts) / 60.0
    return Verification(tuple(entries), winner, restarts, len(all_restarts), minutes)
