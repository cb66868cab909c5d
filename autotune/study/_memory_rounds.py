"""Verification in one process, in memory: the round book of the coverage benchmark, the replay, ``recheck`` and the
tests (:class:`MemoryRounds`), and :func:`run_verification`, the study's own loop
(:class:`~autotune.study._verification.VerificationLoop`) run on it, so what they score is the phase a study runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.records import decode, encode
from autotune.core.records import RestartResult, Workload
from autotune.decisions.planning import RestartPlan
from autotune.decisions.sequential import DEFAULT_MARGIN, SequentialPlan
from autotune.decisions.verification import Candidate, Rounds, Verification
from autotune.engines import RestartEngine
from autotune.study._verification import RoundClaim, VerificationLoop, restart_runner

__all__ = ["MemoryRounds", "run_verification"]



class _MemoryClaim:
    def __init__(self, book: MemoryRounds, rnd: int | None) -> None:
        self.book, self.rnd = book, rnd
        self.restarts: dict[str, list[RestartResult]] = {}

    def record_restarts(self, restarts: Mapping[str, Sequence[RestartResult]]) -> None:
        self.restarts = {k: list(v) for k, v in restarts.items()}
        if self.book.on_change is not None:
            self.book.on_change(self.book.rounds())

    def complete(self) -> None:
        if self.rnd is not None:
            self.book.completed.add(self.rnd)

    def give_up(self) -> None:
        """Nothing to give up: an in-memory book holds no claim, every round of it is free to take."""


class MemoryRounds:
    """A round book for one process, in memory: every round is free to take, nothing is waited for.

    Args:
        done: Restarts of an earlier, interrupted attempt; rounds they began are run again for what is missing.
        on_change: Called with every restart recorded, so a caller can keep what an interruption would lose.
    """

    def __init__(self, done: Rounds | None = None, on_change: Callable[[Rounds], None] | None = None) -> None:
        self.done = done or Rounds()
        self.on_change = on_change
        self.completed: set[int] = set()
        self.claims: list[tuple[int, _MemoryClaim]] = []  # the rounds taken, each with its claim
        self.verification: Verification | None = None
        self.plan: SequentialPlan | None = None

    def sequential_plan(self) -> SequentialPlan | None:
        return self.plan

    def record_sequential_plan(self, plan: SequentialPlan) -> None:
        self.plan = plan

    def concluded(self) -> bool:
        return self.verification is not None

    def refresh(self) -> None:
        pass

    def round_done(self, rnd: int) -> bool:
        return rnd in self.completed

    def try_round(self, rnd: int) -> RoundClaim | None:
        claim = _MemoryClaim(self, rnd)
        self.claims.append((rnd, claim))
        return claim

    wait_round = try_round

    def wait_conclusion(self) -> RoundClaim | None:
        return _MemoryClaim(self, None)

    def idle(self) -> None:
        raise AssertionError("one process holds every round it takes: nothing to wait for")

    def rounds(self) -> Rounds:
        rounds = self.done.merged(Rounds())
        for rnd, claim in self.claims:
            for key, results in claim.restarts.items():
                rounds.add(rnd, key, results)
        return rounds

    def record_verification(self, verification: Verification) -> None:
        self.verification = verification


def run_verification(
    engine: RestartEngine,
    workload: Workload,
    candidates: Sequence[Candidate],
    restarts: int,
    seed_for: Callable[[int], int],
    done: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    on_result: Callable[[Candidate, RestartResult], None] | None = None,
    save_progress: Callable[[Mapping[str, list[dict[str, Any]]]], None] | None = None,
    confidence: float = 0.95,
    interval_method: str = "t",
    alpha: float = 0.05,
    max_restarts: int | None = None,
    may_start: Callable[[int], bool] | None = None,
    slo: Mapping[str, float] | None = None,
    sequential_rounds: int = 0,
    margin: float = DEFAULT_MARGIN,
    baseline_restarts: int | None = None,
    extension_share: float = 0.0,
    paired: bool = True,
    order_seed: int | None = None,
    round_fits: Callable[[int], bool] | None = None,
    plan: RestartPlan | None = None,
) -> Verification:
    """The verification phase in one process, in memory: :class:`VerificationLoop` on a :class:`MemoryRounds`.

    With latency limits (``slo``) only a configuration that meets them can win (:mod:`autotune.stats.latency`); when
    none does, the baseline is named and the report says no configuration met them.

    Args:
        restarts: Counted restarts every configuration gets.
        seed_for: Seed of round ``i``; the same for every configuration in a round (matched restarts).
        done: Restarts already run in an earlier, interrupted attempt: ``config key -> [RestartResult dicts]``.
        on_result: Called after every restart.
        save_progress: Called with every restart so far (``config key -> [RestartResult dicts]``, what ``done``
            takes) after every restart, so an interruption loses nothing.
        alpha: Family-wise error rate of the comparisons with the baseline.
        max_restarts: Cap on counted restarts of a near-tie (default: ``restarts``, no extra rounds).
        may_start: ``may_start(n)``: whether ``n`` more engine starts fit the budget (default: always).
        sequential_rounds: Most rounds of the winner and the baseline while its verdict is open (0: fixed design).
        margin: Equivalence margin that ends them.
        baseline_restarts: Counted restarts of the baseline (default: ``restarts``; see :class:`VerificationLoop`).
        extension_share: Share of ``alpha`` kept for the sequential rounds (see :class:`VerificationLoop`).
        paired: Compare by round (issue 41); ``False``: Welch on pooled restarts, the design before it.
        order_seed: Seeds each round's order (``None``: the candidates' order).
        round_fits: ``round_fits(n)``: whether ``n`` starts of a planned round still fit the budget (``None``:
            planned rounds always run; ``may_start`` governs only the rounds beyond them).
        plan: The restart plan the counts came from: paired, its prior moderates the rounds' variance
            (:attr:`RestartPlan.pair_prior`), as a study's does.
    """
    earlier = Rounds.from_progress({k: [decode(RestartResult, d) for d in v] for k, v in (done or {}).items()})

    def saved(rounds: Rounds) -> None:
        if save_progress is not None:
            save_progress({k: [encode(r) for r in v] for k, v in rounds.progress().items()})

    book = MemoryRounds(earlier, saved)
    again = (lambda _cand: True) if may_start is None else (lambda _cand: may_start(1))
    loop = VerificationLoop(candidates, book, restart_runner(engine, workload, seed_for, again), restarts,
                            max(restarts, max_restarts or restarts), confidence, interval_method, alpha, slo,
                            workload.unit, None if may_start is None else (lambda todo: may_start(len(todo))),
                            on_result, sequential_rounds, margin,
                            None if may_start is None else (lambda pair, most: _fit(may_start, len(pair), most)),
                            baseline_restarts, extension_share, plan=plan, paired=paired, order_seed=order_seed,
                            round_fits=None if round_fits is None else (lambda todo: round_fits(len(todo))))
    verification = loop.run()
    assert verification is not None  # one process concludes what it runs
    return verification


def _fit(may_start: Callable[[int], bool], per_round: int, most: int) -> int:
    fit = 0
    while fit < most and may_start(per_round * (fit + 1)):
        fit += 1
    return fit
