"""Sequential verification: more interleaved rounds of the winner and the baseline while the verdict is open.

After the verification rounds (:mod:`autotune.decisions.verification`) the winner's speedup interval may still
straddle 1. When the budget has room, rounds of the winner and the baseline (on matched seeds, as before) go on
until the interval excludes 1, shows equivalence (it lies inside ``[1/(1+m), 1+m]``, ``m`` the margin), the
planned rounds are spent, or the budget ends.

Reading the interval after every round and stopping when it looks good would not hold its level, so the looks
follow a group-sequential design (:mod:`autotune.stats.sequential`): the plan is fixed at the first look, *before*
its interval is read, from the budget left then (never from the data), and every look's interval is the repeated
confidence interval at its share of the error rate. The winner is the one the verification rounds picked; the
rounds after it only settle its comparison with the baseline.

These are pure functions of the restarts; :mod:`autotune.study._sequential` runs the rounds they call for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from autotune.core.records import RestartResult
from autotune.core.transient import standing
from autotune.stats.intervals import Comparison, PairPrior, Verdict, compare, compare_paired, matched_pairs
from autotune.stats.sequential import SPENDING, look_levels, obrien_fleming_spent

__all__ = ["DEFAULT_MARGIN", "SequentialLook", "SequentialPlan", "continues", "read_look", "sequential_lines"]

#: Equivalence margin: a speedup interval inside [1/1.03, 1.03] says the two are the same within 3%.
DEFAULT_MARGIN = 0.03

DECIDED = "the interval excludes 1"
EQUIVALENT = "the interval lies inside the equivalence margin"
PLANNED = "the planned looks are spent"
BUDGET = "the budget ran out"
FAILED = "a restart failed"


@dataclasses.dataclass(frozen=True)
class SequentialPlan:
    """The design, fixed at the first look (the end of the verification rounds) before its interval is read.

    Attributes:
        winner: Config key of the challenger the verification rounds picked.
        extra_rounds: Rounds planned after the first look (what the budget left then paid for, up to the cap);
            0 is the fixed design.
        first_round: Index of the first sequential round (after every verification round).
        n_winner, n_baseline: Counted restarts of each at the first look.
        alpha: Error rate of the winner's comparison (the family's, Bonferroni over ``comparisons``).
        comparisons: Challengers compared with the baseline.
        margin: Equivalence margin.
        first_alpha: The first look's own error rate, when the design splits it off (a planned verification,
            :mod:`autotune.decisions.planning`): the first look is the planned fixed-size test at ``first_alpha``,
            and ``alpha`` is what is kept for the rounds after it, spent over their looks alone. Whatever made the
            rounds run (a budget that paid for them at once, or a resume with a larger budget after an open
            verdict), a false claim at the first look or at any later one has chance at most
            ``first_alpha + alpha``, since the later looks' design (its rounds and sizes) was fixed before the first
            look was read. 0: the first look is the design's first (the Lan-DeMets design over every look).
    """

    winner: str
    extra_rounds: int
    first_round: int
    n_winner: int
    n_baseline: int
    alpha: float
    comparisons: int = 1
    margin: float = DEFAULT_MARGIN
    first_alpha: float = 0.0
    #: The looks compare the winner with the baseline round by round (``n_winner`` = ``n_baseline`` = the pairs at
    #: the first look; information grows with the pairs); ``False``: unpaired, as studies before issue 41.
    paired: bool = False

    @property
    def total_alpha(self) -> float:
        """The error rate the design holds over every look."""
        return self.alpha + self.first_alpha

    @property
    def looks(self) -> int:
        return self.extra_rounds + 1

    def fraction(self, extra: int) -> float:
        """Information at the look after ``extra`` rounds, as a fraction of the planned maximum.

        The variance of a difference of means goes as ``1/n_a + 1/n_b``; its inverse is the information. Paired,
        the variance of the mean log ratio goes as ``1/pairs``.
        """
        if self.paired:
            return (self.n_winner + extra) / (self.n_winner + self.extra_rounds)

        def info(k: int) -> float:
            return 1.0 / (1.0 / (self.n_winner + k) + 1.0 / (self.n_baseline + k))

        return info(extra) / info(self.extra_rounds)


@dataclasses.dataclass(frozen=True)
class SequentialLook:
    """Where the design stood when verification concluded: what the report states next to the verdict.

    Attributes:
        look, looks: This look and the planned number.
        alpha_spent, alpha: Error rate spent by this look, of the total.
        nominal_confidence: Level the interval was computed at (the repeated confidence interval; it holds
            ``1 - alpha`` together with every earlier look's).
        margin: Equivalence margin.
        equivalent: The interval lies inside ``[1/(1+margin), 1+margin]``.
        stopped: Why no more rounds ran.
        spending: The spending function.
    """

    look: int
    looks: int
    alpha_spent: float
    alpha: float
    nominal_confidence: float
    margin: float
    equivalent: bool
    stopped: str
    spending: str = SPENDING
    #: The first look's own share of ``alpha`` (0: none split off, see :class:`SequentialPlan`).
    first_alpha: float = 0.0

    def describe(self) -> str:
        """``sequential: look 3 of 6, alpha spent 0.021 of 0.05 (...); stopped: ...``."""
        if self.first_alpha > 0.0:
            kept = self.alpha - self.first_alpha
            return (f"sequential: look {self.look} of {self.looks}, alpha spent {self.alpha_spent:.3g} of "
                    f"{self.alpha:.3g} (the planned restarts' look at {self.first_alpha:.3g}, {kept:.3g} kept for "
                    f"{self.looks - 1} more rounds, {self.spending} spending; this look's interval at "
                    f"{100 * self.nominal_confidence:.2f}% nominal); stopped: {self.stopped}")
        return (f"sequential: look {self.look} of {self.looks}, alpha spent {self.alpha_spent:.3g} of "
                f"{self.alpha:.3g} ({self.spending} spending; this look's interval at "
                f"{100 * self.nominal_confidence:.2f}% nominal); stopped: {self.stopped}")


def _counted(results: Sequence[RestartResult]) -> list[float]:
    return [r.measured() for r in results if r.ok and not r.cold]


def _inside_margin(c: Comparison, margin: float) -> bool:
    return (not math.isnan(c.ci_low) and c.ci_low >= 1.0 / (1.0 + margin) and c.ci_high <= 1.0 + margin)


def _values(plan: SequentialPlan, winner: Sequence[RestartResult], baseline: Sequence[RestartResult]
            ) -> tuple[list[float], list[float]]:
    """What the looks read: the pairs of matched rounds (paired), else each side's counted restarts."""
    if plan.paired:
        return matched_pairs(standing(winner), standing(baseline))
    return _counted(winner), _counted(baseline)


def _look(plan: SequentialPlan, winner: Sequence[float], baseline: Sequence[float],
          pair_prior: PairPrior | None = None) -> tuple[Comparison, int, float]:
    """The comparison at the last look these values reach, its look number and its nominal level."""
    extra = max(0, min(len(winner) - plan.n_winner, len(baseline) - plan.n_baseline, plan.extra_rounds))
    if plan.first_alpha > 0.0:
        # The first look at its own share; the rounds after it spend what was kept, over their own looks.
        nominal = (plan.first_alpha if extra == 0
                   else look_levels([plan.fraction(k) for k in range(1, extra + 1)], plan.alpha)[-1])
    else:
        nominal = look_levels([plan.fraction(k) for k in range(extra + 1)], plan.alpha)[-1]
    if plan.paired:
        c = compare_paired(winner[: plan.n_winner + extra], baseline[: plan.n_baseline + extra], alpha=nominal,
                           prior=pair_prior)
    else:
        c = compare(winner[: plan.n_winner + extra], baseline[: plan.n_baseline + extra], alpha=nominal)
    # The interval is the repeated confidence interval: its stated level is the design's, not the nominal one.
    stated = dataclasses.replace(c, confidence=1.0 - plan.total_alpha, comparisons=plan.comparisons)
    return stated, extra + 1, nominal


def read_look(plan: SequentialPlan, winner: Sequence[RestartResult], baseline: Sequence[RestartResult],
              pair_prior: PairPrior | None = None) -> tuple[Comparison, SequentialLook]:
    """The winner's comparison with the baseline at the last look its restarts reach, and the design's state
    (paired looks read the rounds' variance moderated by ``pair_prior``, as :func:`conclude` does)."""
    comparison, look, nominal = _look(plan, *_values(plan, winner, baseline), pair_prior)
    equivalent = _inside_margin(comparison, plan.margin)
    failed = any(not r.ok for r in (*standing(winner), *standing(baseline)))  # a rerun transient failure is none
    if comparison.verdict != Verdict.NOT_SIGNIFICANT:
        stopped = DECIDED
    elif equivalent:
        stopped = EQUIVALENT
    elif failed:
        stopped = FAILED
    elif look >= plan.looks:
        stopped = PLANNED
    else:
        stopped = BUDGET
    spent = obrien_fleming_spent(plan.fraction(look - 1), plan.alpha)
    if plan.first_alpha > 0.0:
        spent = plan.first_alpha + (obrien_fleming_spent(plan.fraction(look - 1), plan.alpha) if look > 1 else 0.0)
    return comparison, SequentialLook(look, plan.looks, spent, plan.total_alpha, 1.0 - nominal, plan.margin,
                                      equivalent, stopped, first_alpha=plan.first_alpha)


def continues(plan: SequentialPlan, winner: Sequence[RestartResult], baseline: Sequence[RestartResult],
              rnd: int, pair_prior: PairPrior | None = None) -> bool:
    """Whether sequential round ``rnd`` runs, from the winner's and the baseline's restarts of the rounds before it.

    It runs while it is within the plan, every earlier sequential round added a counted restart to both (an
    empty one means the budget ended; a failed restart ends the phase), and the look after them neither excludes
    1 nor shows equivalence.
    """
    done = rnd - plan.first_round
    if done < 0 or done >= plan.extra_rounds or any(not r.ok for r in (*standing(winner), *standing(baseline))):
        return False
    w, b = _values(plan, winner, baseline)
    if len(w) != plan.n_winner + done or len(b) != plan.n_baseline + done:
        return False
    comparison, _, _ = _look(plan, w, b, pair_prior)
    return comparison.verdict == Verdict.NOT_SIGNIFICANT and not _inside_margin(comparison, plan.margin)


def sequential_lines(look: SequentialLook) -> list[str]:
    """The report's lines under the verdict: the design's state, and equivalence when the interval shows it."""
    lines = [look.describe()]
    if look.equivalent:
        lines.append(f"Equivalent within {100 * look.margin:g}%: the interval lies inside "
                     f"[{1 / (1 + look.margin):.3f}, {1 + look.margin:.3f}].")
    return lines
