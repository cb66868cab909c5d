"""Verification's timed window: how many timed passes each verification restart runs (issue 41, item 6).

The search runs every restart with the workload's timed passes. For verification, the passes and the rounds are
planned together: a restart's mean varies as ``between + within / n`` over ``n`` passes
(:mod:`autotune.stats.components`, Kalibera & Jones), and costs what a start costs before its timed passes plus ``n``
passes. More passes average the fast wander of one engine away but make every round dearer, and on a drifting machine
they also set the two sides of a round further apart in time, so the level they are compared at differs more. For
each ``n`` the planner (:func:`autotune.decisions.planning.plan_rounds`) is asked what rounds it would plan at that
noise and price; the window kept is the one whose plan reaches its effect for the fewest minutes, or, where none
reaches it within the budget, the one that resolves the smallest effect. The choice goes by the planner's own power
calculation, degrees of freedom included, so a cheaper window that buys one more round can win over a quieter one;
it moves away from the search's window only for a material gain (:data:`MIN_GAIN`).

Only a budget in engine-minutes (or none) is sized: under ``--budget-restarts`` a start costs one whatever its
passes, and the study keeps the workload's window.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from autotune.decisions.planning import RestartPlan
from autotune.stats.components import Components

__all__ = ["LEVEL_TAU_S", "LEVEL_VAR", "MAX_WINDOW_PASSES", "MIN_GAIN", "MIN_WITHIN_DF", "WindowCosts", "sized_plan"]

#: The machine's level as a stationary process (Ornstein-Uhlenbeck): its variance in log throughput and its
#: correlation time. The two sides of a round, ``g`` seconds apart, compare at levels that differ by
#: ``2 * LEVEL_VAR * (1 - exp(-g / LEVEL_TAU_S))``: a longer window moves them apart. Empirical: the H100 fit of issue
#: 41's restarts (level sd 0.092, 105 s; docs/measurements/drift-fit.txt), the largest drift recorded (the pooled
#: H100/H200 fit: sd 0.078, 130 s). A quieter machine would be sized slightly longer windows than it needs.
LEVEL_VAR = 0.092 ** 2
LEVEL_TAU_S = 105.0
#: The most timed passes a verification restart is given (a pass is seconds; beyond a dozen the drift term rules).
MAX_WINDOW_PASSES = 12
#: The least degrees of freedom of the within-restart variance to size from; with fewer the workload's window stays.
MIN_WITHIN_DF = 4
#: The least gain for which verification's window differs from the search's: that many fewer planned minutes, or an
#: effect resolved that much smaller (in log). The components come from a few restarts' passes, and adjacent passes
#: correlate (``within`` is then low, which flatters short windows), so a smaller predicted gain is inside their
#: error. Measured (docs/benchmarks.md, "The timed window, sized with the rounds", 400 studies a cell, same seeds):
#: on the H100 drift scenario, taking the window the planner predicted a few percent better (one pass instead of the
#: search's two) gave 39.3% conclusive and right at 30 minutes against 42.2% keeping the search's, 82.0% against
#: 81.8% at 60: no gain to be had there, so the search's window (and its comparability) is kept.
MIN_GAIN = 0.10


@dataclasses.dataclass(frozen=True)
class WindowCosts:
    """What the study measured its restarts to cost, in seconds.

    Attributes:
        pass_s: One timed pass.
        restart_s: A warm start before its timed passes (the engine's start-up and warm-up).
    """

    pass_s: float
    restart_s: float


#: ``plan_at(challenger_var, baseline_var, challenger_minutes, baseline_minutes)``: the planner's rounds at that
#: noise and price.
PlanAt = Callable[[float, float, float, float], RestartPlan]


def sized_plan(plan_at: PlanAt, challenger_var: float, baseline_var: float, challenger_minutes: float,
               baseline_minutes: float, parts: Components | None, searched: int, costs: WindowCosts | None,
               most: int = MAX_WINDOW_PASSES, min_gain: float = MIN_GAIN) -> RestartPlan:
    """The plan with its timed window sized (:attr:`RestartPlan.timed_passes`), or the plan at the search's window
    when the study cannot size one (no restart with two passes, too few degrees of freedom, no measured pass).

    Args:
        challenger_var, baseline_var: Each side's planning variance of a restart of ``searched`` passes.
        challenger_minutes, baseline_minutes: What such a restart costs.
        parts: The study's variance components.
        searched: The search's timed passes.
        costs: The study's measured pass and start costs.
        min_gain: The least predicted gain for another window than the search's (:data:`MIN_GAIN`).
    """
    searched = max(1, int(searched))
    if parts is None or parts.within_df < MIN_WITHIN_DF or costs is None or costs.pass_s <= 0:
        return plan_at(challenger_var, baseline_var, challenger_minutes, baseline_minutes)
    best: tuple[tuple[int, float, int], RestartPlan, int] | None = None
    searched_key: tuple[int, float, int] | None = None
    searched_plan: RestartPlan | None = None
    for n in sorted(set(range(1, max(1, most) + 1)) | {searched}):
        # A restart of n passes: its passes' part of the variance at n, the drift between the round's sides moved
        # by the longer or shorter window, never below what n passes alone leave.
        shift = parts.within * (1.0 / n - 1.0 / searched) + _drift(costs, n) - _drift(costs, searched)
        floor = parts.within / n
        extra = costs.pass_s * (n - searched) / 60.0
        cm, bm = max(challenger_minutes + extra, 1e-6), max(baseline_minutes + extra, 1e-6)
        plan = plan_at(max(challenger_var + shift, floor), max(baseline_var + shift, floor), cm, bm)
        per_round = plan.challengers * cm + bm
        minutes = plan.baseline * per_round
        # A plan that reaches --min-effect beats one that reaches only the search's effect, which beats one the budget
        # caps; the first two are judged by their minutes, the last by the effect it resolves.
        tier = {"min-effect": 0, "search": 1}.get(plan.basis, 2)
        key = (tier, minutes if tier < 2 else plan.resolvable, abs(n - searched))
        if n == searched:
            searched_key, searched_plan = key, plan
        if best is None or key < best[0]:
            best = (key, plan, n)
    assert best is not None
    _, plan, n = best
    if n != searched and searched_plan is not None and not _material(best[0], searched_key, min_gain):
        plan, n = searched_plan, searched
    return dataclasses.replace(plan, timed_passes=n, window=_describe(n, searched, parts, costs))


def _material(key: tuple[int, float, int], searched: tuple[int, float, int] | None, min_gain: float) -> bool:
    """Whether the best window's plan beats the search window's by ``min_gain``: it reaches a better tier, or the
    same tier for that many fewer minutes, or resolves an effect that much smaller (in log)."""
    if searched is None or key[0] < searched[0]:
        return True
    if key[0] > searched[0]:
        return False
    if key[0] < 2:
        return key[1] <= (1.0 - min_gain) * searched[1]
    return math.isfinite(key[1]) and (not math.isfinite(searched[1])
                                      or math.log(key[1]) <= (1.0 - min_gain) * math.log(searched[1]))


def _drift(costs: WindowCosts, passes: int) -> float:
    """Each side's share of the level difference between a round's two restarts, one restart of ``passes`` apart."""
    gap = costs.restart_s + passes * costs.pass_s
    return LEVEL_VAR * -math.expm1(-gap / LEVEL_TAU_S)


def _cv(var: float) -> float:
    return 100.0 * math.sqrt(math.expm1(max(0.0, var)))


def _describe(n: int, searched: int, parts: Components, costs: WindowCosts) -> str:
    between = (f"restarts {_cv(parts.between):.0f}% beyond their passes" if parts.between_df
               else "restarts beyond their passes not yet measured")
    return (f"timed window {n} pass{'es' if n != 1 else ''} of ~{costs.pass_s:.0f} s (the search's {searched}; a pass "
            f"varies {_cv(parts.within):.0f}%, {between}, a start costs ~{costs.restart_s:.0f} s before its passes)")
