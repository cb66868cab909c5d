"""Verification sized to the noise: how many restarts each side needs, before the restarts are run.

Three restarts a side cannot resolve a 1.23x win when the baseline varies 12% between restarts (the H200 MoE
study, ``docs/measurements/h200-moe30.md``: ``[0.92, 1.63]``); six a side could, and so could three of a steady
winner against eight of the noisy baseline. So the restarts are planned the way a trial is sized for a stated power
and a smallest effect (and pyperf calibrates its runs to the noise):

* **Noise.** Each side's between-restart variance of log throughput, from its counted search restarts, pulled
  toward the study's pooled variance (a scaled inverse chi-square prior worth :data:`PRIOR_DF` degrees of
  freedom), so one restart, or two that happened to agree, does not plan a verification on no noise.
* **Effect.** The smallest effect worth detecting (``--min-effect``, default 1.05x) when the budget pays for it;
  otherwise the effect the search saw, discounted to its cube root (the search's best is the luckiest of many noisy
  means: on the H200 it read 1.60x where verification measured 1.23x), and never below the smallest effect.
* **Restarts.** The fewest restarts (challengers' and baseline's together, each challenger counting its own) whose
  Welch test on log throughput, at the family's level (Bonferroni over the challengers), has the stated power,
  computed with the noncentral t at the Welch-Satterthwaite degrees of freedom, rounded down as the analysis rounds
  them (:func:`autotune.stats.intervals.log_ratio_interval`). The noisier side gets more (Neyman's allocation,
  found by search over whole numbers rather than by the square-root rule, which ignores the degrees of freedom).
* **Budget.** During the search at most :data:`MAX_SHARE` of the budget (at verification start, all that is left); when that cannot pay for the effect, the plan takes what it
  pays for, allocated the same way, and says which effect it resolves.

The restart counts depend only on the search's restarts, never on verification's own, so the verification
interval keeps its level whatever the plan (its restarts are fresh and the count is fixed before they run).

Empirical choices (none tuned to a simulator profile): :data:`PRIOR_DF` (two degrees of freedom: a prior worth
one configuration measured three times), :data:`DEFAULT_CV` (the prior before any configuration has two restarts:
10%, pyperf's "unstable" line, inside the 2-15% measured on the H200), the discount of the search's effect (:data:`SEARCH_EFFECT_POWER`), and
:data:`MAX_SHARE`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.decisions.noise import DEFAULT_CV, log_variance, pooled_sum
from autotune.stats import scipy_stats
from autotune.stats.intervals import PairPrior
from autotune.records import reader

__all__ = ["DEFAULT_CV", "DEFAULT_MIN_EFFECT", "DEFAULT_POWER", "MAX_SHARE", "BudgetReach", "NoiseEstimate",
           "RestartPlan", "budget_reach", "closing_restarts", "estimate_noise", "paired_power", "plan_restarts",
           "plan_rounds", "pooled_log_variance", "power", "resolvable_paired"]

#: The smallest effect worth detecting, by default (a setting: ``--min-effect``).
DEFAULT_MIN_EFFECT = 1.05
#: The power a plan aims for, by default (``--power``).
DEFAULT_POWER = 0.8
#: The prior's weight, in degrees of freedom (empirical; see the module's docstring).
PRIOR_DF = 2.0
#: The search's effect is discounted to this power of itself before a plan is sized for it (empirical: the search's
#: best is the luckiest of many noisy means; on the H200 MoE study it read 1.60x where verification measured 1.23x,
#: and on the replayed H200 restarts, docs/benchmarks.md, planning for the square root (1.26x) left 30% of draws
#: open at 30 minutes, the cube root (1.17x) about 11%).
SEARCH_EFFECT_POWER = 1.0 / 3.0
#: The most of a budget a plan may take (the search needs the rest to find something worth verifying).
MAX_SHARE = 0.25
#: Fewest counted restarts of a side (a variance needs two; the analysis's t quantile at one degree of freedom is
#: 12.7, so three is the least that resolves anything but a huge effect).
MIN_RESTARTS = 3
#: Most counted restarts a side is planned (beyond this the budget, not the plan, is the limit).
MAX_RESTARTS = 40
#: Without a budget, the most restarts a side is planned (empirical: about what a study without a budget spent on
#: verification before, three configurations and the baseline at three restarts).
UNBUDGETED = 10


def pooled_log_variance(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The study's restart noise: variance of log throughput pooled over every configuration with two or more
    counted restarts, and its degrees of freedom (``(DEFAULT_CV**2, 0)`` when none has two)."""
    total, df = pooled_sum(groups)
    if df == 0:
        return math.log1p(DEFAULT_CV ** 2), 0
    return total / df, df


@dataclasses.dataclass(frozen=True)
class NoiseEstimate:
    """One side's between-restart noise as the plan uses it: the posterior variance of log throughput."""

    variance: float
    restarts: int

    @property
    def cv(self) -> float:
        """The CV a lognormal with this log variance has."""
        return math.sqrt(math.expm1(self.variance))


def estimate_noise(values: Sequence[float], prior_variance: float, prior_df: float = PRIOR_DF) -> NoiseEstimate:
    """``values``' log variance pulled toward ``prior_variance`` by ``prior_df`` degrees of freedom."""
    var, df = log_variance(values)
    post = (prior_df * prior_variance + df * var) / (prior_df + df) if prior_df + df > 0 else prior_variance
    return NoiseEstimate(post, len(values))


def _power_grid(n_c: np.ndarray, n_b: np.ndarray, var_c: float, var_b: float, log_effect: float,
                alpha: float) -> np.ndarray:
    """Power of the analysis's two-sided Welch test on log throughput (Cox's variance, degrees of freedom floored
    as :func:`autotune.stats.intervals.log_ratio_interval` floors them) to find ``exp(log_effect)`` at level
    ``alpha``, for arrays of restart counts (broadcast; one call of the noncentral t for the whole grid)."""
    stats = scipy_stats()
    n_c = np.asarray(n_c, dtype=float)
    n_b = np.asarray(n_b, dtype=float)
    w = var_c / n_c + var_c * var_c / (2.0 * (n_c - 1)) + var_b / n_b + var_b * var_b / (2.0 * (n_b - 1))
    se = np.sqrt(w)
    a, b = var_c / n_c, var_b / n_b
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.floor((a + b) ** 2 / (a * a / (n_c - 1) + b * b / (n_b - 1)))
        df = np.where(np.isfinite(df), np.maximum(1.0, df), 1.0)
        ncp = np.where(se > 0, abs(log_effect) / np.where(se > 0, se, 1.0), np.inf)
    crit = stats.t.isf(alpha / 2.0, df)
    out = np.where(np.isinf(ncp), 1.0 if log_effect != 0.0 else 0.0, 0.0)
    finite = ~np.isinf(ncp)
    if finite.any():
        ncp_f, df_f, crit_f = np.broadcast_arrays(ncp, df, crit)
        out = np.array(np.broadcast_to(out, ncp_f.shape), dtype=float)
        out[finite] = stats.nct.sf(crit_f[finite], df_f[finite], ncp_f[finite])
    return out


def power(n_challenger: int, n_baseline: int, challenger: NoiseEstimate | float, baseline: NoiseEstimate | float,
          effect: float, alpha: float) -> float:
    """The chance that ``n_challenger`` against ``n_baseline`` restarts give an interval excluding 1 when the true
    speedup is ``effect``, at level ``alpha`` (per comparison). Noise as :class:`NoiseEstimate` or log variance."""
    var_c = challenger.variance if isinstance(challenger, NoiseEstimate) else float(challenger)
    var_b = baseline.variance if isinstance(baseline, NoiseEstimate) else float(baseline)
    if n_challenger < 2 or n_baseline < 2:
        return 0.0
    return float(_power_grid(np.array(n_challenger), np.array(n_baseline), var_c, var_b, math.log(effect), alpha))


_COUNTS = np.arange(MIN_RESTARTS, MAX_RESTARTS + 1)


def _grid(var_c: float, var_b: float, effect: float, alpha: float) -> np.ndarray:
    """Power for every ``(n_c, n_b)`` in ``[MIN_RESTARTS, MAX_RESTARTS]``, rows by challenger restarts."""
    return _power_grid(_COUNTS[:, None], _COUNTS[None, :], var_c, var_b, math.log(effect), alpha)


def _costs(challengers: int, cost_c: float, cost_b: float) -> np.ndarray:
    return challengers * _COUNTS[:, None] * cost_c + _COUNTS[None, :] * cost_b


def _cheapest(var_c: float, var_b: float, effect: float, target: float, alpha: float, challengers: int,
              max_cost: float | None, cost_c: float, cost_b: float) -> tuple[int, int, float] | None:
    """The cheapest ``(n_c, n_b, cost)`` reaching ``target`` power within ``max_cost`` (``None``: none does); ties go
    to fewer challenger restarts."""
    costs = _costs(challengers, cost_c, cost_b)
    ok = _grid(var_c, var_b, effect, alpha) >= target
    if max_cost is not None:
        ok &= costs <= max_cost + 1e-9
    if not ok.any():
        return None
    masked = np.where(ok, costs, np.inf)
    i, j = np.unravel_index(int(np.argmin(masked)), masked.shape)
    return int(_COUNTS[i]), int(_COUNTS[j]), float(costs[i, j])


def _best_within(var_c: float, var_b: float, effect: float, alpha: float, challengers: int, max_cost: float,
                 cost_c: float, cost_b: float) -> tuple[int, int]:
    """The allocation with the most power for ``effect`` that ``max_cost`` pays for (at least the minimum)."""
    costs = _costs(challengers, cost_c, cost_b)
    fits = costs <= max_cost + 1e-9
    if not fits.any():
        return MIN_RESTARTS, MIN_RESTARTS
    powers = np.where(fits, _grid(var_c, var_b, effect, alpha), -1.0)
    # The most power; among equal power (to 1e-9) the cheapest.
    top = powers.max()
    masked = np.where(powers >= top - 1e-9, costs, np.inf)
    i, j = np.unravel_index(int(np.argmin(masked)), masked.shape)
    return int(_COUNTS[i]), int(_COUNTS[j])


def _resolvable(n_c: int, n_b: int, var_c: float, var_b: float, target: float, alpha: float) -> float:
    """The smallest speedup that ``n_c`` against ``n_b`` restarts find with ``target`` power (to 0.1% in ratio;
    ``inf`` beyond 20x)."""
    logs = np.linspace(0.001, 3.0, 3000)
    powers = np.array([float(_power_grid(np.array(n_c), np.array(n_b), var_c, var_b, x, alpha)) for x in logs[::100]])
    # Coarse first (every 100th point), then the fine points inside the first coarse step that reaches the target.
    hit = np.nonzero(powers >= target)[0]
    if hit.size == 0:
        return math.inf
    k = int(hit[0])
    if k == 0:
        return math.exp(float(logs[0]))
    fine = logs[(k - 1) * 100: k * 100 + 1]
    stats = scipy_stats()
    se = math.sqrt(var_c / n_c + var_c * var_c / (2.0 * (n_c - 1)) + var_b / n_b + var_b * var_b / (2.0 * (n_b - 1)))
    a, b = var_c / n_c, var_b / n_b
    df = max(1.0, math.floor((a + b) ** 2 / (a * a / (n_c - 1) + b * b / (n_b - 1)))) if a + b > 0 else 1.0
    fine_power = stats.nct.sf(float(stats.t.isf(alpha / 2.0, df)), df, fine / se) if se > 0 else np.ones_like(fine)
    return math.exp(float(fine[int(np.argmax(fine_power >= target))]))


@dataclasses.dataclass(frozen=True)
class RestartPlan:
    """How many counted restarts verification gives each side, and why (what the report and ``--json`` state).

    Attributes:
        challenger, baseline: Counted restarts of each challenger and of the baseline.
        challengers: Challengers the plan pays for.
        challenger_cv, baseline_cv: The noise planned for (posterior CVs).
        effect: The speedup planned to be resolved at ``power``.
        min_effect: The smallest effect worth detecting (the setting).
        power: The power aimed for.
        alpha: Level of each comparison (the family's, Bonferroni over the challengers).
        resolvable: The smallest speedup this plan resolves at ``power``.
        basis: ``min-effect`` (the setting paid for), ``search`` (the search's effect, discounted), ``budget`` (what
            the budget's share paid for).
        search_effect: The speedup the search saw (shrunk estimates), if any.
        min_effect_needs: ``(challenger, baseline)`` restarts the smallest effect would need (``None``: more than
            :data:`MAX_RESTARTS` a side), when the plan is for something else.
        minutes: What the plan's starts cost at the study's prices (``None``: not priced).
    """

    challenger: int
    baseline: int
    challengers: int
    challenger_cv: float
    baseline_cv: float
    effect: float
    min_effect: float
    power: float
    alpha: float
    resolvable: float
    basis: str
    search_effect: float | None = None
    min_effect_needs: tuple[int, int] | None = None
    minutes: float | None = None
    #: Rounds of every side, analysed by round (:func:`plan_rounds`); ``False``: the unpaired Welch plan of studies
    #: before issue 41.
    paired: bool = False
    #: Where the planned noise came from (the plan line states it): the prior's source and the restarts behind it.
    noise_source: str = ""
    #: Timed passes of each verification restart, sized with the rounds (:mod:`autotune.decisions.window`);
    #: ``None``: the workload's, as the search ran them.
    timed_passes: int | None = None
    #: Why that window (the plan line states it).
    window: str = ""
    #: The prior the paired analysis moderates the rounds' log-ratio variance by (:class:`PairPrior`), fixed here
    #: before any round ran; ``None``: the rounds' own variance alone (plans stored before it).
    pair_variance: float | None = None
    pair_prior_df: float = 0.0

    @property
    def pair_prior(self) -> PairPrior | None:
        var, df = self.pair_variance, self.pair_prior_df
        # A stored value autotune never writes (a hand-edited store) reads as no prior: the rounds' own variance.
        if not self.paired or var is None or not (0.0 < var < math.inf and 0.0 <= df < math.inf):
            return None
        return PairPrior(var, df)

    @property
    def starts(self) -> int:
        return self.challengers * self.challenger + self.baseline

    def describe(self) -> str:
        """``verification: 3 winner + 8 baseline restarts planned, baseline CV 12%, winner CV 2%, to resolve ...``."""
        if self.paired:
            return self._describe_paired()
        who = "winner" if self.challengers == 1 else f"per challenger (x{self.challengers})"
        text = (f"verification: {self.challenger} {who} + {self.baseline} baseline restarts planned, baseline CV "
                f"{100 * self.baseline_cv:.0f}%, challenger CV {100 * self.challenger_cv:.0f}%, to resolve "
                f"{self.effect:.2f}x at {100 * self.power:.0f}% power")
        return text + self._why_and_cost(_needs(self.min_effect_needs))

    def _describe_paired(self) -> str:
        who = "the winner" if self.challengers == 1 else f"{self.challengers} challengers"
        text = (f"verification: {self.baseline} rounds of {who} and the baseline planned, paired by round, "
                f"restart CV {100 * self.baseline_cv:.0f}% baseline / {100 * self.challenger_cv:.0f}% challenger "
                f"planned ({self.noise_source}), to resolve {self.effect:.2f}x at {100 * self.power:.0f}% power")
        text += self._why_and_cost(_rounds_needed(self.min_effect_needs))
        prior = self.pair_prior
        if prior is not None:
            text += (f"; the rounds' variance read with this prior worth {prior.df:.0f} degrees of freedom "
                     f"(a round's CV {100 * math.sqrt(math.expm1(prior.variance)):.0f}%)")
        return text + (f"; {self.window}" if self.window else "")

    def _why_and_cost(self, needs: str) -> str:
        """Why the plan is for this effect (when not ``min_effect``) and what it costs."""
        text = ""
        if self.basis == "search" and self.search_effect is not None:
            text += (f" (the search saw {self.search_effect:.2f}x, discounted to its cube root for its selection bias; "
                     f"{self.min_effect:.2f}x would need {needs})")
        elif self.basis == "budget":
            text += f" (what the budget's share pays for; {self.min_effect:.2f}x would need {needs})"
        if self.minutes is not None:
            text += f", ~{self.minutes:.1f} min"
        return text


@reader(RestartPlan)
def _read_restart_plan(data: dict[str, Any]) -> dict[str, Any]:
    # A plan that resolves no effect at all stores its resolvable speedup, infinite, as null.
    return {**data, "resolvable": math.inf if data.get("resolvable") is None else data["resolvable"]}


def _rounds_needed(needs: tuple[int, int] | None) -> str:
    if needs is None:
        return f"more than {MAX_RESTARTS} rounds"
    return f"{needs[1]} rounds"


def _needs(needs: tuple[int, int] | None) -> str:
    if needs is None:
        return f"more than {MAX_RESTARTS} restarts a side"
    return f"{needs[0]} + {needs[1]} restarts"


def plan_restarts(challenger: NoiseEstimate, baseline: NoiseEstimate, *, challengers: int = 1,
                  min_effect: float = DEFAULT_MIN_EFFECT, target_power: float = DEFAULT_POWER, alpha: float = 0.05,
                  search_effect: float | None = None, max_minutes: float | None = None,
                  challenger_minutes: float = 1.0, baseline_minutes: float = 1.0) -> RestartPlan:
    """The restarts each side needs (the module's docstring has the rules).

    Args:
        challenger: Noise of the challengers (the leading one's, or the pooled prior before there is one).
        baseline: Noise of the baseline.
        challengers: Challengers verified against the baseline (each gets ``challenger`` restarts; the level is
            Bonferroni over them).
        alpha: The family's error rate.
        search_effect: The speedup the search's shrunk estimates saw, best challenger over baseline.
        max_minutes: The most the plan may cost (``None``: no budget).
        challenger_minutes, baseline_minutes: What one counted restart of each costs.
    """
    k = max(1, int(challengers))
    level = alpha / k
    var_c, var_b = challenger.variance, baseline.variance
    budgeted = max_minutes is not None
    if max_minutes is None:  # no budget: no more than UNBUDGETED restarts a side
        max_minutes = UNBUDGETED * (k * challenger_minutes + baseline_minutes)

    def cheapest(effect: float) -> tuple[int, int, float] | None:
        return _cheapest(var_c, var_b, effect, target_power, level, k, max_minutes, challenger_minutes,
                         baseline_minutes)

    uncapped = _cheapest(var_c, var_b, min_effect, target_power, level, k, None, challenger_minutes,
                         baseline_minutes)
    needs = None if uncapped is None else (uncapped[0], uncapped[1])
    found = cheapest(min_effect)
    basis, effect = "min-effect", min_effect
    if found is None and search_effect is not None and search_effect > min_effect:
        effect = max(min_effect, search_effect ** SEARCH_EFFECT_POWER)
        found = cheapest(effect)
        basis = "search"
    if found is None:
        basis = "budget"
        n_c, n_b = _best_within(var_c, var_b, effect, level, k, max_minutes, challenger_minutes, baseline_minutes)
    else:
        n_c, n_b = found[0], found[1]
    resolvable = _resolvable(n_c, n_b, var_c, var_b, target_power, level)
    if basis == "budget":
        effect = resolvable
    return RestartPlan(n_c, n_b, k, challenger.cv, baseline.cv, effect, min_effect, target_power, level,
                       resolvable, basis, search_effect, needs if basis != "min-effect" else None,
                       k * n_c * challenger_minutes + n_b * baseline_minutes if budgeted else None)


def closing_restarts(challenger: Sequence[float], baseline: Sequence[float], alpha: float,
                     target_power: float = DEFAULT_POWER, prior_variance: float | None = None
                     ) -> tuple[int, int] | None:
    """More restarts ``(challenger, baseline)`` that would likely close an open comparison: the fewest extra that
    give ``target_power`` at the speedup it shows now, with the noise it showed (``None``: none within
    :data:`MAX_RESTARTS` a side, e.g. a speedup of about 1). An estimate for the user, not a decision: the verdict
    never reads it."""
    n_c0, n_b0 = len(challenger), len(baseline)
    if n_c0 < 2 or n_b0 < 2:
        return None
    prior = prior_variance if prior_variance is not None else pooled_log_variance([challenger, baseline])[0]
    var_c = estimate_noise(challenger, prior, 0.0).variance or prior
    var_b = estimate_noise(baseline, prior, 0.0).variance or prior
    ratio = (sum(challenger) / n_c0) / (sum(baseline) / n_b0)
    if not math.isfinite(ratio) or abs(math.log(ratio)) < 1e-3:
        return None
    best: tuple[int, int] | None = None
    for total in range(1, 2 * MAX_RESTARTS + 1):
        for extra_c in range(0, total + 1):
            extra_b = total - extra_c
            if power(n_c0 + extra_c, n_b0 + extra_b, var_c, var_b, ratio, alpha) >= target_power:
                best = (extra_c, extra_b)
                break
        if best is not None:
            return best
    return None


# -- the paired plan (issue 41) ----------------------------------------------------------------------------------
#
# Verification runs rounds: every side once on the round's seed, a minute or two apart, analysed by round
# (:func:`autotune.stats.intervals.compare_paired`). A round's pair shares the machine's level, so the drift that
# moved both sides 15-18% between the H100 study's search and its verification cancels. Every side gets the same
# number of rounds (a round without one side gives no pair), so the plan is one number: the rounds.
# The pair's variance is planned as the sum of the two sides' (no credit for the correlation a round gives, which
# the search cannot measure): conservative where rounds do correlate, right where they do not.


def paired_power(rounds: int | np.ndarray, var_d: float, effect: float, alpha: float,
                 prior_df: float = 0.0) -> np.ndarray | float:
    """Power of the two-sided paired t test on ``rounds`` pairs with log-ratio variance ``var_d`` to find
    ``effect`` at level ``alpha`` (noncentral t at ``rounds - 1`` degrees of freedom, and the ``prior_df`` the
    analysis's moderated variance adds: :class:`~autotune.stats.intervals.PairPrior`)."""
    stats = scipy_stats()
    n = np.asarray(rounds, dtype=float)
    df = np.maximum(1.0, n - 1.0 + prior_df)
    if var_d <= 0.0:
        out = np.where(n >= 2, 1.0 if effect != 1.0 else 0.0, 0.0)
        return float(out) if out.ndim == 0 else out
    ncp = abs(math.log(effect)) / np.sqrt(var_d / np.maximum(n, 1.0))
    crit = stats.t.isf(alpha / 2.0, df)
    out = np.where(n >= 2, stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp), 0.0)
    return float(out) if out.ndim == 0 else out


_ROUNDS = np.arange(MIN_RESTARTS, MAX_RESTARTS + 1)


def _fewest_rounds(var_d: float, effect: float, target: float, alpha: float, most: int = MAX_RESTARTS,
                   prior_df: float = 0.0) -> int | None:
    """The fewest rounds (at least :data:`MIN_RESTARTS`) with ``target`` power, up to ``most`` (``None``: more)."""
    counts = _ROUNDS if most == MAX_RESTARTS else np.arange(MIN_RESTARTS, most + 1)
    ok = np.nonzero(np.asarray(paired_power(counts, var_d, effect, alpha, prior_df)) >= target)[0]
    return None if ok.size == 0 else int(counts[ok[0]])


def resolvable_paired(rounds: int, var_d: float, target: float, alpha: float, prior_df: float = 0.0) -> float:
    """The smallest speedup ``rounds`` pairs find with ``target`` power (``inf``: none up to 20x)."""
    if rounds < 2:
        return math.inf
    logs = np.linspace(0.0005, 3.0, 6000)
    if var_d <= 0.0:
        return math.exp(float(logs[0]))
    stats = scipy_stats()
    df = rounds - 1 + prior_df
    crit = float(stats.t.isf(alpha / 2.0, df))
    ncp = logs / math.sqrt(var_d / rounds)
    powers = stats.nct.sf(crit, df, ncp)
    hit = np.nonzero(powers >= target)[0]
    return math.inf if hit.size == 0 else math.exp(float(logs[hit[0]]))


def plan_rounds(challenger_var: float, baseline_var: float, *, challengers: int = 1,
                min_effect: float = DEFAULT_MIN_EFFECT, target_power: float = DEFAULT_POWER, alpha: float = 0.05,
                search_effect: float | None = None, max_minutes: float | None = None,
                challenger_minutes: float = 1.0, baseline_minutes: float = 1.0,
                challenger_cv: float | None = None, baseline_cv: float | None = None,
                noise_source: str = "", prior_df: float = 0.0) -> RestartPlan:
    """The rounds a paired verification needs: the fewest whose paired t test (Bonferroni over ``challengers``) has
    ``target_power`` for ``min_effect`` within ``max_minutes``; else for the search's effect discounted to its cube
    root; else the most rounds the budget pays for, stating the effect they resolve. Variances are the planning
    values of :func:`autotune.decisions.noise.planning_noise`; ``prior_df``: the degrees of freedom the analysis's
    prior adds to the rounds' (:class:`~autotune.stats.intervals.PairPrior`), so the power planned is the
    analysis's.
    """
    k = max(1, int(challengers))
    level = alpha / k
    var_d = challenger_var + baseline_var
    per_round = k * challenger_minutes + baseline_minutes
    budgeted = max_minutes is not None
    cap = max_minutes if max_minutes is not None else UNBUDGETED * per_round
    fits = max(0, int(math.floor(cap / per_round + 1e-9)))

    needed = _fewest_rounds(var_d, min_effect, target_power, level, prior_df=prior_df)
    basis, effect, rounds = "min-effect", min_effect, needed
    if rounds is None or rounds > fits:
        rounds = None
        if search_effect is not None and search_effect > min_effect:
            effect = max(min_effect, search_effect ** SEARCH_EFFECT_POWER)
            found = _fewest_rounds(var_d, effect, target_power, level, prior_df=prior_df)
            if found is not None and found <= fits:
                basis, rounds = "search", found
    if rounds is None:
        basis = "budget"
        rounds = max(MIN_RESTARTS, min(fits, MAX_RESTARTS))
    resolvable = resolvable_paired(rounds, var_d, target_power, level, prior_df)
    if basis == "budget":
        effect = resolvable
    needs = None if needed is None else (needed, needed)
    return RestartPlan(rounds, rounds, k, challenger_cv if challenger_cv is not None else math.sqrt(math.expm1(challenger_var)),
                       baseline_cv if baseline_cv is not None else math.sqrt(math.expm1(baseline_var)),
                       effect, min_effect, target_power, level, resolvable, basis, search_effect,
                       needs if basis != "min-effect" else None,
                       rounds * per_round if budgeted else None, paired=True, noise_source=noise_source)


#: How far :func:`budget_reach` looks for the rounds ``min_effect`` needs.
REACH_ROUNDS = 2000


@dataclasses.dataclass(frozen=True)
class BudgetReach:
    """What a study's budget can prove before anything runs (issue 41): the smallest speedup its verification share
    resolves at the prior's noise, and what ``min_effect`` would need.

    Attributes:
        cv: The noise assumed (the prior's planning value).
        source: Where it came from.
        minutes: The budget (``None``: a restart budget; ``rounds`` then counts starts).
        rounds: Rounds of one challenger and the baseline the verification share pays for.
        resolvable: The smallest speedup they resolve at ``power``.
        min_effect: The smallest effect asked for.
        min_effect_rounds: Rounds it needs (``None``: more than :data:`MAX_RESTARTS`).
        min_effect_minutes: Engine-minutes a study needs for it (``None``: not priced).
        power: The power.
    """

    cv: float
    source: str
    minutes: float | None
    rounds: int
    resolvable: float
    min_effect: float
    min_effect_rounds: int | None
    min_effect_minutes: float | None
    power: float

    @property
    def in_reach(self) -> bool:
        return self.resolvable <= self.min_effect + 1e-9

    def describe(self) -> str:
        budget = f"{self.minutes:g} minutes" if self.minutes is not None else "this budget"
        can = ("nothing (too few rounds for an interval)" if not math.isfinite(self.resolvable)
               else f"about {self.resolvable:.2f}x")
        text = (f"at ~{100 * self.cv:.0f}% restart noise ({self.source}), {budget} can prove {can} at "
                f"{100 * self.power:.0f}% power")
        if self.in_reach:
            return text + f"; --min-effect {self.min_effect:g} is in reach"
        if self.min_effect_rounds is None:
            return text + f"; {self.min_effect:g}x needs more than {REACH_ROUNDS} rounds: out of reach"
        need = (f"about {_duration(self.min_effect_minutes)}" if self.min_effect_minutes is not None
                else f"{self.min_effect_rounds} rounds")
        return text + f"; {self.min_effect:g}x needs {need}: --min-effect is out of reach of this budget"


def _duration(minutes: float) -> str:
    if minutes >= 90:
        return f"{minutes / 60:.1f} hours"
    return f"{minutes:.0f} minutes"


def budget_reach(prior_var: float, source: str, *, budget_minutes: float | None, budget_starts: int | None,
                 restart_minutes: float, min_effect: float = DEFAULT_MIN_EFFECT,
                 target_power: float = DEFAULT_POWER, alpha: float = 0.05, share: float = MAX_SHARE,
                 prior_df: float = 0.0) -> BudgetReach:
    """:class:`BudgetReach` for one challenger against the baseline, both at ``prior_var`` (a planning value), a
    round costing two restarts of ``restart_minutes`` each; the verification gets ``share`` of the budget (what
    the search holds back for it)."""
    var_d = 2.0 * prior_var
    per_round = 2.0 * restart_minutes if budget_minutes is not None else 2.0
    total = budget_minutes if budget_minutes is not None else float(budget_starts or 0)
    rounds = min(MAX_RESTARTS, int(math.floor(share * total / per_round + 1e-9)))
    resolvable = resolvable_paired(rounds, var_d, target_power, alpha, prior_df)
    need = _fewest_rounds(var_d, min_effect, target_power, alpha, most=REACH_ROUNDS, prior_df=prior_df)
    need_minutes = None
    if need is not None and budget_minutes is not None:
        need_minutes = need * per_round / share
    return BudgetReach(math.sqrt(math.expm1(prior_var)), source, budget_minutes, rounds, resolvable, min_effect,
                       need, need_minutes, target_power)
