"""The sequential rounds of verification: the winner and the baseline again while the verdict is open.

:class:`~autotune.study._verification.VerificationLoop` calls :func:`sequential_rounds` after its verification
rounds. The design is fixed once, at the first look (:func:`plan`): the winner those rounds picked, and as many
rounds as the budget left then pays for, up to the cap; it is stored in the round book, so every worker and a
resume follow the same plan. Each round then runs only if :func:`autotune.decisions.sequential.continues` says so
on the rounds before it, so who runs what is a function of earlier rounds, as for the near-tie rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from autotune.decisions.sequential import SequentialPlan, continues
from autotune.decisions.verification import BASELINE, Candidate, Rounds, conclude
from autotune.stats.intervals import PairPrior
from autotune.store.ledger import Ledger
from autotune.study._budget import _starts_fit
from autotune.study.options import StudyOptions


class _Claim(Protocol):
    def complete(self) -> None: ...


#: The round book's claim on a round (:class:`~autotune.study._verification.RoundClaim`).
ClaimT = TypeVar("ClaimT", bound=_Claim)
ClaimT_co = TypeVar("ClaimT_co", bound=_Claim, covariant=True)


class _Book(Protocol[ClaimT_co]):
    """What the sequential rounds read and write of the round book
    (:class:`~autotune.study._verification.RoundBook`)."""

    def concluded(self) -> bool: ...
    def rounds(self) -> Rounds: ...
    def sequential_plan(self) -> SequentialPlan | None: ...
    def record_sequential_plan(self, plan: SequentialPlan) -> None: ...
    def wait_round(self, rnd: int) -> ClaimT_co | None: ...


class VerificationLoop(Protocol[ClaimT]):
    """What the sequential rounds read of :class:`~autotune.study._verification.VerificationLoop`, which calls them
    with itself: that module imports this one, so this one names what it needs instead of importing it."""

    @property
    def book(self) -> _Book[ClaimT]: ...
    @property
    def candidates(self) -> Sequence[Candidate]: ...
    @property
    def common(self) -> int: ...
    @property
    def cap(self) -> int: ...
    @property
    def confidence(self) -> float: ...
    @property
    def interval_method(self) -> str: ...
    @property
    def alpha(self) -> float: ...
    @property
    def slo(self) -> Mapping[str, float] | None: ...
    @property
    def unit(self) -> str: ...
    @property
    def paired(self) -> bool: ...
    @property
    def pair_prior(self) -> PairPrior | None: ...
    @property
    def tie_end(self) -> int: ...
    @property
    def sequential_rounds(self) -> int: ...
    @property
    def extension_share(self) -> float: ...
    @property
    def margin(self) -> float: ...
    @property
    def rounds_fit(self) -> Callable[[Sequence[Candidate], int], int] | None: ...
    @property
    def may_start(self) -> Callable[[Sequence[Candidate]], bool] | None: ...
    def _todo(self, participants: Sequence[Candidate], rnd: int) -> list[Candidate]: ...
    def _run_round(self, participants: Sequence[Candidate], rnd: int, claim: ClaimT) -> None: ...

__all__ = ["plan", "rounds_fit", "sequential_rounds"]


def _before(rounds: Rounds, rnd: int) -> Rounds:
    return Rounds({r: dict(v) for r, v in rounds.by_round.items() if r < rnd})


def plan(loop: VerificationLoop[ClaimT]) -> SequentialPlan | None:
    """The stored plan, or the one made now from the verification rounds' conclusion and the budget left.

    ``None`` when there is nothing to settle: the baseline won, or the winner has no interval.
    """
    stored = loop.book.sequential_plan()
    if stored is not None:
        return stored
    fixed = _before(loop.book.rounds(), loop.tie_end).progress()
    first = conclude(loop.candidates, fixed, loop.common, loop.confidence, loop.interval_method, loop.alpha,
                     max_restarts=loop.cap, slo=loop.slo or {}, unit=loop.unit, paired=loop.paired,
                     pair_prior=loop.pair_prior)
    winner, comparison = first.winner, first.winner.comparison
    if winner.candidate.role == BASELINE or comparison is None or comparison.ci_low != comparison.ci_low:
        return None
    pair = [winner.candidate, first.baseline.candidate]
    most = loop.sequential_rounds
    # Paired, the information is the rounds both sides ran (a round one side lost gives none).
    n_w = comparison.pairs if loop.paired and comparison.pairs is not None else winner.summary.n
    n_b = comparison.pairs if loop.paired and comparison.pairs is not None else first.baseline.summary.n
    alpha = round(1.0 - comparison.confidence, 12)
    if loop.extension_share > 0.0:
        # A planned verification: the rounds after the first look are fixed now, whatever the budget pays for
        # today, so that a resume with a larger budget runs rounds of this same design (their alpha was kept).
        made = SequentialPlan(winner.candidate.config.key(), most, loop.tie_end, n_w, n_b,
                              round(alpha * loop.extension_share, 12), comparison.comparisons, loop.margin,
                              first_alpha=round(alpha * (1.0 - loop.extension_share), 12), paired=loop.paired)
        loop.book.record_sequential_plan(made)
        return made
    extra = most if loop.rounds_fit is None else max(0, min(most, loop.rounds_fit(pair, most)))
    made = SequentialPlan(winner.candidate.config.key(), extra, loop.tie_end, n_w, n_b, alpha,
                          comparison.comparisons, loop.margin, paired=loop.paired)
    loop.book.record_sequential_plan(made)
    return made


def sequential_rounds(loop: VerificationLoop[ClaimT]) -> None:
    """Run the sequential rounds this process takes; stop when the design says the verdict is settled."""
    if loop.sequential_rounds <= 0 or loop.book.concluded():
        return
    design = plan(loop)
    if design is None or design.extra_rounds == 0:
        return
    pair = [c for c in loop.candidates if c.config.key() == design.winner or c.role == BASELINE]
    winner = next(c for c in pair if c.role != BASELINE)
    base = next(c for c in pair if c.role == BASELINE)
    for rnd in range(design.first_round, design.first_round + design.extra_rounds):
        if loop.book.concluded():
            return
        earlier = _before(loop.book.rounds(), rnd).progress()
        if not continues(design, earlier.get(winner.config.key(), ()), earlier.get(base.config.key(), ()), rnd,
                         loop.pair_prior):
            return
        todo = loop._todo(pair, rnd)
        if todo and loop.may_start is not None and not loop.may_start(todo):
            # The budget ends the rounds here, unclaimed: a resume with a larger budget runs this round and goes
            # on with the same design (the conclusion states the look it stopped at, and why).
            return
        claim = loop.book.wait_round(rnd)
        if claim is None:
            continue  # another worker ran this round
        todo = loop._todo(pair, rnd)
        if todo:
            loop._run_round(todo, rnd, claim)
        claim.complete()


def rounds_fit(ledger: Ledger, options: StudyOptions, pair: Sequence[Candidate], most: int) -> int:
    """How many rounds of warm restarts of ``pair`` the study's budget still pays for, up to ``most``."""
    starts = [(c.config.key(), False) for c in pair]
    fit = 0
    while fit < most and _starts_fit(ledger, options, starts * (fit + 1)):
        fit += 1
    return fit
