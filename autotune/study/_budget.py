"""The engine-start budget: what a start costs, what the study must hold back, and whether more starts fit.

A cold first start (compiling) can cost several times a warm one (H200 MoE: 167 s against 27-34 s), so a
forecast from the mean of the starts seen so far, dominated early on by cold ones, holds back far more for
verification than it will cost, and a 26-minute budget bought no search. Each planned start is priced by its
kind instead: a cold start at the study's mean cold start, a warm restart at that configuration's own warm mean
where it has one, else at the study's warm mean.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from autotune.config.space import SearchSpace
from autotune.core.records import RestartResult
from autotune.decisions.verification import Candidate
from autotune.stats.coldstart import ColdVerdict
from autotune.store.ledger import Ledger
from autotune.study.options import StudyOptions

__all__ = ["BudgetTooSmall", "Start", "StartCosts", "check_budget", "minimum_plan", "smallest_restart_budget"]

#: A planned engine start: the configuration's key (``None``: not known yet) and whether it starts cold.
Start = tuple[str | None, bool]


class BudgetTooSmall(ValueError):
    """The budget cannot pay for the baselines, one search trial and verification; the message names the flag and
    the smallest budget that would."""


@dataclasses.dataclass(frozen=True)
class StartCosts:
    """Engine wall minutes of the study's successful starts so far, by kind."""

    warm_by_key: dict[str, list[float]]
    warm: list[float]
    cold: list[float]

    @classmethod
    def of(cls, ledger: Ledger) -> StartCosts:
        by_key: dict[str, list[float]] = {}
        warm: list[float] = []
        cold: list[float] = []
        retried = ledger.retried()
        runs = [(ledger.config_key(t), r) for t in ledger.study.get_trials(deepcopy=False) if t.number not in retried
                for r in ledger.restarts(t)]
        for stored in (ledger.verify_progress(), *ledger.verify_rounds().values()):
            runs += [(key, RestartResult.from_dict(d)) for key, ds in stored.items() for d in ds]
        for key, r in runs:
            if r.wall_s is None or not r.ok:
                continue
            minutes = float(r.wall_s) / 60.0
            if r.cold:
                cold.append(minutes)
            else:
                warm.append(minutes)
                if key is not None:
                    by_key.setdefault(key, []).append(minutes)
        return cls(by_key, warm, cold)

    @property
    def known(self) -> bool:
        return bool(self.warm or self.cold)

    def price(self, start: Start) -> float:
        """Minutes one planned start should cost; 0 while nothing was measured (the first start is the measurement).

        A cold start on an engine that never reported one costs what its warm starts cost; a warm start before any
        warm start was measured is priced at the cold mean (an upper bound for one or two starts, no more).
        """
        key, cold = start
        warm_mean = sum(self.warm) / len(self.warm) if self.warm else None
        cold_mean = sum(self.cold) / len(self.cold) if self.cold else None
        if cold:
            return cold_mean if cold_mean is not None else (warm_mean or 0.0)
        own = self.warm_by_key.get(key) if key is not None else None
        if own:
            return sum(own) / len(own)
        return warm_mean if warm_mean is not None else (cold_mean or 0.0)

    def forecast(self, starts: Sequence[Start]) -> float:
        return sum(self.price(s) for s in starts)


def _top_k_follows_minutes(options: StudyOptions) -> bool:
    """Verification's top-k is left to a minutes budget alone (no ``top_k``, no restart budget)."""
    return options.top_k_follows_minutes


def _verify_top_k(ledger: Ledger, options: StudyOptions) -> int:
    """Configurations verification takes: :attr:`StudyOptions.verify_top_k`, except under a minutes budget alone,
    where it scales with the starts the budget buys at the study's measured warm-start price (one until a warm
    start is priced: the least that lets a study under a minutes budget claim anything)."""
    if not _top_k_follows_minutes(options):
        return options.verify_top_k
    costs = StartCosts.of(ledger)
    warm = costs.price((None, False)) if costs.warm else 0.0
    return options.top_k_for(options.budget_minutes / warm if warm > 0 else 0)


def _verify_plan(ledger: Ledger, space: SearchSpace, options: StudyOptions) -> list[Start]:
    """Verification's share: the baseline and ``top_k`` configurations, ``verify_restarts`` warm restarts each, and
    with several compile caches one cold start per verified configuration and other cache. The runner-up
    (:func:`_candidates`) gets no share: it runs on a start the search left over."""
    if not options.verify:
        return []
    keys: list[str | None] = [space.baseline().key(), *([None] * _verify_top_k(ledger, options))]
    plan: list[Start] = [(key, False) for key in keys for _ in range(options.verify_restarts)]
    others = min(options.verify_restarts, max(0, ledger.compile_caches() - 1))
    return plan + [(key, True) for key in keys for _ in range(others)]


def _runner_up_starts(ledger: Ledger) -> list[Start]:
    """The runner-up's share of verification: its first-round restart, and with several compile caches a cold
    start before it (the round may run in a cache its configuration never ran in)."""
    return [(None, True)] * (ledger.compile_caches() > 1) + [(None, False)]


def _entry_starts(options: StudyOptions, verdict: ColdVerdict) -> list[Start]:
    """A new configuration's first starts: its cold start, its first counted restarts (the cold one among them when
    the study's cold starts count)."""
    return [(None, True)] + [(None, False)] * (options.policy.min_restarts - (1 if verdict.counts else 0))


def _first_starts(options: StudyOptions, landed: int, verdict: ColdVerdict) -> int:
    """Engine starts a trial announces when it starts: its first counted restarts, plus one when nothing ran yet for
    the cold first start of a new configuration unless cold starts count."""
    return options.policy.min_restarts + (1 if landed == 0 and not verdict.counts else 0)


def minimum_plan(space: SearchSpace, options: StudyOptions) -> list[Start]:
    """The least a study can do and still say something: the baselines, one search trial, verification.

    Priced on the conservative side: no cold start counts (the study has not shown it may), and the first
    baseline gets a second counted restart (racing needs the study's noise, :class:`RacingPolicy`). Verification
    takes the restart budget's top-k, or one configuration under a minutes budget alone (what a budget that
    barely pays for the minimum buys, :func:`_verify_top_k`).
    """
    policy = options.policy
    plan: list[Start] = []
    for i, params in enumerate(space.baseline_params()):
        key = space.config_from_params(params).key()
        counted = policy.min_restarts
        if i == 0 and policy.racing and policy.pooled and policy.max_restarts >= 2:
            counted = max(counted, 2)
        plan += [(key, True)] + [(key, False)] * counted
    plan += [(None, True)] + [(None, False)] * policy.min_restarts
    if options.verify:
        top_k = 1 if _top_k_follows_minutes(options) else options.verify_top_k
        keys: list[str | None] = [space.baseline().key(), *([None] * top_k)]
        plan += [(key, False) for key in keys for _ in range(options.verify_restarts)]
    return plan


def smallest_restart_budget(space: SearchSpace, options: StudyOptions) -> int:
    """The smallest ``--budget-restarts`` that pays for :func:`minimum_plan` (verification's top-k scales with it)."""
    budget = 1
    while True:
        need = len(minimum_plan(space, dataclasses.replace(options, budget_restarts=budget)))
        if need <= budget:
            return budget
        budget = need


def check_budget(ledger: Ledger, space: SearchSpace, options: StudyOptions) -> None:
    """Refuse a budget too small for :func:`minimum_plan`, naming the smallest one that would do.

    A restart budget is checked before anything runs. A minutes budget needs to know what a start costs: it is
    checked before anything runs when the study has a warm start on record (a resume), else as soon as one has
    been measured (the first baseline's second start); once a search trial has finished it is past the minimum
    and never refused.

    Raises:
        BudgetTooSmall: one line with the flag, what it must pay for, and the least budget that would.
    """
    if ledger.finished_search_trials() > len(space.baseline_params()):
        return
    what = "the baselines, one search trial and verification"
    plan = minimum_plan(space, options)
    if options.budget_restarts is not None and options.budget_restarts < len(plan):
        least = smallest_restart_budget(space, options)
        raise BudgetTooSmall(f"--budget-restarts {options.budget_restarts} is too small for {what} ({len(plan)} "
                             f"engine starts): use --budget-restarts {least} or more")
    if options.budget_minutes is None:
        return
    costs = StartCosts.of(ledger)
    if not costs.warm:
        return  # a warm start priced at the cold one would refuse budgets that suffice (the 26 minutes)
    need = costs.forecast(plan)
    if need > options.budget_minutes:
        cold = costs.price((None, True)) * 60.0
        warm = costs.price((None, False)) * 60.0
        raise BudgetTooSmall(f"--budget-minutes {options.budget_minutes:g} is too small for {what} ({len(plan)} "
                             f"engine starts at the measured {cold:.0f} s per cold start and {warm:.0f} s per warm "
                             f"one): use --budget-minutes {math.ceil(need)} or more")


def _search_may_start(ledger: Ledger, options: StudyOptions, extra: Sequence[Start],
                      space: SearchSpace | None = None) -> bool:
    """Whether the ``extra`` search starts fit the budget, with verification's share and every running trial's
    announced starts (this worker's included) held back."""
    used, minutes = ledger.budget_used()
    in_flight = ledger.starts_in_flight(unplanned=options.policy.min_restarts)
    if options.budget_restarts is not None:
        held = in_flight + options.verify_reserve
        if options.verify:
            # A verification round in a compile cache that never ran a configuration starts it cold first: with
            # several caches (machines, workdirs) hold one such start per verified configuration and other cache.
            held += (options.verify_top_k + 1) * min(options.verify_restarts, max(0, ledger.compile_caches() - 1))
        if used + held + len(extra) > options.budget_restarts:
            return False
    if options.budget_minutes is not None:
        costs = StartCosts.of(ledger)
        top_k = _verify_top_k(ledger, options)
        reserve = (_verify_plan(ledger, space, options) if space is not None
                   else [(None, False)] * ((top_k + 1) * options.verify_restarts if options.verify else 0))
        # Running trials' announced starts are mostly warm restarts; their cold starts have landed already. Until
        # a warm start has been measured the reserve cannot be priced (at the cold price it would hold back several
        # times what it costs): the first warm start is the measurement, and only what is asked for is priced.
        need = costs.forecast([*extra, *reserve, *[(None, False)] * in_flight] if costs.warm else [*extra])
        if minutes + need > options.budget_minutes:
            return False
    return True


def _verify_may_start(ledger: Ledger, options: StudyOptions, participants: Sequence[Candidate]) -> bool:
    """Whether a round of warm restarts of ``participants`` fits the whole study's budget."""
    return _starts_fit(ledger, options, [(c.config.key(), False) for c in participants])


def _starts_fit(ledger: Ledger, options: StudyOptions, starts: Sequence[Start]) -> bool:
    """Whether ``starts`` more engine starts fit the whole study's budget (restarts, and minutes at their price)."""
    used, minutes = ledger.budget_used()
    if options.budget_restarts is not None and used + len(starts) > options.budget_restarts:
        return False
    if options.budget_minutes is not None and minutes + StartCosts.of(ledger).forecast(starts) > options.budget_minutes:
        return False
    return True

