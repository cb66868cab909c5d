"""Where a study's engine time went: the restarts' phases (``RestartResult.facts``' ``phase_*_s``), totalled.

Every restart the study paid for counts once (search and verification, cold and failed ones too), so the totals
answer "what did the budget buy": start-ups (launch, import, vLLM's set-up, weight load, compile, memory profiling,
graph capture, kernel warm-up, the rest of start-up) against warm-up and timed passes. A phase no restart reported
is left out; restarts from engines (or autotune versions) that report no phases are counted apart, so the totals
never pass for the whole study's time; restarts recorded before set-up, profiling and kernel warm-up were named
keep those seconds in "other start-up".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from autotune.core import facts as F
from autotune.core.records import RestartResult
from autotune.records import record

__all__ = ["PhaseTotals", "phase_totals", "render_phases"]

#: How each phase reads in the report.
LABELS: Mapping[str, str] = {
    F.PHASE_LAUNCH_S: "launch", F.PHASE_IMPORT_S: "imports", F.PHASE_SETUP_S: "engine set-up",
    F.PHASE_LOAD_S: "weight load", F.PHASE_COMPILE_S: "compile", F.PHASE_PROFILE_S: "memory profiling",
    F.PHASE_CAPTURE_S: "graph capture", F.PHASE_KERNEL_WARMUP_S: "kernel warm-up",
    F.PHASE_OTHER_STARTUP_S: "other start-up", F.PHASE_WARMUP_S: "warm-up", F.PHASE_TIMED_S: "timed passes",
}


@record(renamed={"without": "restarts_without_phases"}, emits=("total_s",), after={"total_s": "seconds"})
@dataclasses.dataclass(frozen=True)
class PhaseTotals:
    """Seconds per phase over the study's restarts.

    Attributes:
        seconds: Phase key -> total seconds, in the order a restart runs them (phases nobody reported left out).
        restarts: Restarts that reported phases.
        without: Restarts that did not (another engine, an older autotune).
        warmup_passes: Warm-up passes, all restarts that said so together.
        warmup_rules: What ended the warm-ups (``facts["warmup_rule"]``: cap, rule, prior, none) -> restarts;
            restarts from before the fact are not in it.
    """

    seconds: Mapping[str, float]
    restarts: int
    without: int
    warmup_passes: int
    warmup_rules: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return float(sum(self.seconds.values()))


def phase_totals(restarts: Iterable[RestartResult]) -> PhaseTotals | None:
    """The totals over ``restarts``; ``None`` when none reported a phase."""
    seconds = {key: 0.0 for key in F.PHASES}
    seen: set[str] = set()
    counted = without = passes = 0
    rules: dict[str, int] = {}
    for r in restarts:
        mine = {k: float(v) for k, v in r.facts.items() if k in seconds and not isinstance(v, bool | str)}
        if not mine:
            without += 1
            continue
        counted += 1
        seen.update(mine)
        for key, value in mine.items():
            seconds[key] += value
        passes += int(r.facts.get(F.WARMUP_PASSES, 0) or 0)
        rule = r.facts.get(F.WARMUP_RULE)
        if isinstance(rule, str):
            rules[rule] = rules.get(rule, 0) + 1
    if not counted:
        return None
    return PhaseTotals({k: v for k, v in seconds.items() if k in seen}, counted, without, passes, rules)


def render_phases(totals: PhaseTotals | None) -> list[str]:
    """Two lines for the text report: the phases' minutes and shares, and the warm-up passes per restart."""
    if totals is None or totals.total_s <= 0:
        return []
    parts = [f"{LABELS[k]} {v / 60:.1f} min ({100 * v / totals.total_s:.0f}%)" for k, v in totals.seconds.items()]
    note = f"; {totals.without} restarts did not say" if totals.without else ""
    return [f"Engine time by phase over {totals.restarts} restarts: " + ", ".join(parts) + note,
            f"Warm-up: {totals.warmup_passes / totals.restarts:.1f} passes per restart on average "
            f"({_ended_by(totals.warmup_rules)})."]


#: What ended a warm-up, as the report says it (``facts["warmup_rule"]``).
_RULE_WORDS = {"prior": "the rule with the study's noise prior", "rule": "the rule alone", "cap": "the cap",
               "none": "no warm-up"}


def _ended_by(rules: Mapping[str, int]) -> str:
    if not rules:
        return "ended by the MSER/trend rule or its cap"
    return "ended by " + ", ".join(f"{_RULE_WORDS.get(k, k)} {n}" for k, n in
                                   sorted(rules.items(), key=lambda kv: (-kv[1], kv[0])))
