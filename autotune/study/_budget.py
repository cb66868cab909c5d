"""The engine-start budget: what a start costs, what the study must hold back, and whether more starts fit.

A cold first start (compiling) can cost several times a warm one (H200 MoE: 167 s against 27-34 s), so a
forecast from the mean of the starts seen so far, dominated early on by cold ones, holds back far more for
verification than it will cost, and a 26-minute budget bought no search. Each planned start is priced by its
kind instead, and where the study's starts reported phases (``phase_*_s`` facts, :mod:`autotune.core.facts`) it is
priced phase by phase, so what one configuration paid is not charged to another:

* start-up phases that depend on the configuration's caches (:data:`~autotune.core.facts.CACHE_PHASES`: compile,
  memory profiling with its kernel JIT, graph capture, kernel warm-up): the study's mean over cold starts for a
  cold start; for a warm restart the configuration's own warm mean, else the study's warm mean;
* the rest of start-up (launch, imports, set-up, weight load, other start-up) and what the wall clock holds beyond
  the phases (shutdown, settling): the study's mean over its phased starts of the same kind, cold or warm. Not
  over every start: a process's first start boots vLLM's forkserver host (its launch holds the host's imports,
  21.1 s on the H200 dummy space, and its set-up 22.5 s) and is cold; averaged into every start it priced a
  forked warm restart at 51 s against the 29.5 s it took, and refused a budget the study fitted
  (``docs/measurements/h200-dummy-new.md``);
* warm-up: the seconds the configuration's own warm-up took (its starts of the same kind first, then any of its
  starts), else the study's mean over starts of that kind. Warm-up passes are one round of the prompts each, so
  their length follows the configuration's speed, and a cold start's warm-up carries the ramp a warm one does not;
* timed passes: the study's timed passes per start times the configuration's own mean timed pass where one ran,
  else the study's (timed passes are sized to ``workload.pass_seconds``, so a new configuration's is about the
  study's).

**Starts into empty caches.** The first start into a cache compiles what every configuration shares: on the
H200, 170-190 s against 38-90 s for a later configuration's cold start (``docs/measurements/h200-dummy-new.md``:
after a resume on a fresh machine two such starts were the only cold ones, so every planned cold start was priced
at ~185 s and the search ended with 12.2 of 20 engine-minutes left). An engine that says so
(:data:`~autotune.core.facts.CACHES_EMPTY`) has those starts left out of the cold price once a cold start into
filled caches has run, and a planned start is priced as one into empty caches only where the engine says its
caches are empty now (:meth:`autotune.engines.EngineBackend.caches_empty`): the first cold start of a forecast.

Empirical choices: the plain means (no trimming: a study's first start into empty caches, 2-3 minutes on an H200
against 30-50 s for later cold starts, inflates the cold price until more cold starts dilute it, the safe side for a
budget), and a new configuration's warm-up priced at the study's mean (the warm-up rule's stopping point varies per
restart more than per configuration in the H200 series, ``tests/data/warmup_series.json``). Nothing is tuned to a
landscape: every number is the study's.

Without phases (the ``cmd`` engine, records from before them, a kind of start no phased start has shown yet) a
start is priced at the whole-restart mean of its kind: a cold start at the study's mean cold start, a warm restart
at that configuration's own warm mean where it has one, else at the study's warm mean.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

from autotune.records import decode
from autotune.config.space import SearchSpace
from autotune.core import facts as F
from autotune.core.records import RestartResult
from autotune.decisions.planning import RestartPlan
from autotune.decisions.verification import BASELINE, Candidate
from autotune.stats.coldstart import ColdVerdict
from autotune.store.ledger import Ledger
from autotune.study._planning import plan_for
from autotune.study.options import StudyOptions

__all__ = ["BudgetTooSmall", "PhasedStart", "Start", "StartCosts", "check_budget", "minimum_plan",
           "smallest_restart_budget"]

#: A planned engine start: the configuration's key (``None``: not known yet) and whether it starts cold.
Start = tuple[str | None, bool]
#: A start of a configuration not known yet, cold and warm.
_ANY_KEY_COLD: Start = (None, True)
_ANY_KEY_WARM: Start = (None, False)


class BudgetTooSmall(ValueError):
    """The budget cannot pay for the baselines, one search trial and verification; the message names the flag and
    the smallest budget that would."""


#: Start-up phases that do not depend on the caches (priced from the starts of the same kind, as the others).
_FIXED_PHASES = tuple(k for k in F.PHASES if k not in F.CACHE_PHASES and k not in F.PASS_PHASES)


@dataclasses.dataclass(frozen=True)
class PhasedStart:
    """One successful start that reported its phases, in seconds.

    Attributes:
        key: The configuration's key (``None``: not known).
        cold: Whether it started cold.
        cache_s: Its cache-dependent start-up phases (:data:`~autotune.core.facts.CACHE_PHASES`) together.
        fixed_s: The rest of its start-up, and its wall time beyond every phase (shutdown, settling).
        warmup_s: Seconds of its warm-up passes.
        timed_passes: Timed passes it ran.
        pass_s: Its mean timed pass (``None``: no timed pass said how long).
        empty: It started into empty caches (:data:`~autotune.core.facts.CACHES_EMPTY`).
    """

    key: str | None
    cold: bool
    cache_s: float
    fixed_s: float
    warmup_s: float
    timed_passes: int
    pass_s: float | None
    empty: bool = False

    @classmethod
    def of(cls, key: str | None, r: RestartResult) -> PhasedStart | None:
        """``None`` when ``r`` reported no phase (another engine, an older record) or no wall time."""
        phases = {k: float(v) for k, v in r.facts.items() if k in F.PHASES and isinstance(v, int | float)
                  and not isinstance(v, bool)}
        if not phases or r.wall_s is None:
            return None
        timed = len(r.passes_s)
        timed_s = phases.get(F.PHASE_TIMED_S, sum(r.passes_s))
        beyond = float(r.wall_s) - sum(phases.values())  # shutdown and the like; never priced below nothing
        return cls(key=key, cold=bool(r.cold), cache_s=sum(phases.get(k, 0.0) for k in F.CACHE_PHASES),
                   fixed_s=sum(phases.get(k, 0.0) for k in _FIXED_PHASES) + max(0.0, beyond),
                   warmup_s=phases.get(F.PHASE_WARMUP_S, 0.0), timed_passes=timed,
                   pass_s=timed_s / timed if timed and timed_s > 0 else None,
                   empty=r.facts.get(F.CACHES_EMPTY) is True)


def _mean(values: Iterable[float]) -> float | None:
    seen = list(values)
    return sum(seen) / len(seen) if seen else None


@dataclasses.dataclass(frozen=True)
class StartCosts:
    """Engine wall minutes of the study's successful starts so far, by kind, and the phases of those that said."""

    warm_by_key: dict[str, list[float]]
    warm: list[float]
    cold: list[float]
    phased: tuple[PhasedStart, ...] = ()
    #: Starts into empty caches: the price of a start the engine says will be one.
    empty: list[float] = dataclasses.field(default_factory=list)
    #: Cold starts into caches something had filled (not in ``empty``): the cold price once there is one.
    cold_filled: list[float] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, ledger: Ledger) -> StartCosts:
        retried = ledger.retried()
        runs = [(ledger.config_key(t), r) for t in ledger.study.get_trials(deepcopy=False) if t.number not in retried
                for r in ledger.restarts(t)]
        for stored in (ledger.verify_progress(), *ledger.verify_rounds().values()):
            runs += [(key, decode(RestartResult, d)) for key, ds in stored.items() for d in ds]
        prior = ledger.meta().warm_start.get("start_costs") if ledger.has_meta() else None
        return cls.from_runs(runs).with_prior(prior)

    def with_prior(self, prior: Mapping[str, Sequence[float]] | None) -> StartCosts:
        """These costs, with a warm start's carried whole-start minutes (``{"warm": [...], "cold": [...]}``, from
        studies on the same engine and machine: ``study._warm_start``) standing in for a kind of start this study
        has not measured yet; its own starts replace them as they land."""
        if not prior:
            return self
        return dataclasses.replace(self, warm=self.warm or [float(m) for m in prior.get("warm", ())],
                                   cold=self.cold or [float(m) for m in prior.get("cold", ())])

    def carried(self) -> dict[str, list[float]]:
        """Whole-start minutes by kind, as a warm start carries them to a new study (:meth:`with_prior`)."""
        return {"warm": list(self.warm), "cold": list(self.cold_filled or self.cold)}

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[str | None, RestartResult]]) -> StartCosts:
        """The costs of ``(configuration key, restart)`` pairs; failed starts and starts without a wall time are
        left out (what a failure costs is not what a planned start will)."""
        by_key: dict[str, list[float]] = {}
        warm: list[float] = []
        cold: list[float] = []
        phased: list[PhasedStart] = []
        empty: list[float] = []
        cold_filled: list[float] = []
        for key, r in runs:
            if r.wall_s is None or not r.ok:
                continue
            minutes = float(r.wall_s) / 60.0
            into_empty = r.facts.get(F.CACHES_EMPTY) is True
            if into_empty:
                empty.append(minutes)
            if r.cold:
                cold.append(minutes)
                if not into_empty:
                    cold_filled.append(minutes)
            else:
                warm.append(minutes)
                if key is not None:
                    by_key.setdefault(key, []).append(minutes)
            if (start := PhasedStart.of(key, r)) is not None:
                phased.append(start)
        return cls(by_key, warm, cold, tuple(phased), empty, cold_filled)

    @property
    def known(self) -> bool:
        return bool(self.warm or self.cold)

    def price(self, start: Start, empty: bool = False) -> float:
        """Minutes one planned start should cost; 0 while nothing was measured (the first start is the measurement).

        Phase by phase where the study's starts of that kind reported phases (the module's docstring), else at the
        whole-restart mean of its kind: a cold start on an engine that never reported one costs what its warm
        starts cost; a warm start before any warm start was measured is priced at the cold mean (an upper bound for
        one or two starts, no more).
        """
        if empty and start[1] and self.empty:
            # A start the engine says goes into empty caches: what such starts cost, whole (they are few).
            return sum(self.empty) / len(self.empty)
        by_phase = self._phase_price(start)
        if by_phase is not None:
            return by_phase
        key, cold = start
        warm_mean = _mean(self.warm)
        cold_mean = _mean(self.cold_filled or self.cold)
        if cold:
            return cold_mean if cold_mean is not None else (warm_mean or 0.0)
        own = self.warm_by_key.get(key) if key is not None else None
        if own:
            return sum(own) / len(own)
        return warm_mean if warm_mean is not None else (cold_mean or 0.0)

    def _phase_price(self, start: Start) -> float | None:
        """Minutes by phases; ``None`` when no phased start of this kind ran (the whole-restart price stands)."""
        key, cold = start
        kind = [s for s in self.phased if s.cold == cold]
        if not kind:
            return None
        # A cold start into caches something else filled: starts into empty caches only while nothing else ran cold.
        kind = [s for s in kind if not s.empty] or kind
        own = [s for s in kind if key is not None and s.key == key] if not cold else []
        cache_s = _mean(s.cache_s for s in (own or kind)) or 0.0
        fixed_s = _mean(s.fixed_s for s in kind) or 0.0  # of its kind: the first start boots the forkserver host
        mine = [s.pass_s for s in self.phased if s.pass_s is not None and key is not None and s.key == key]
        pass_s = _mean(mine) or _mean(s.pass_s for s in self.phased if s.pass_s is not None) or 0.0
        mine_all = [s for s in self.phased if key is not None and s.key == key]
        warmups = next(ws for ws in ([s for s in mine_all if s.cold == cold], mine_all, kind) if ws)
        warmup_s = _mean(s.warmup_s for s in warmups) or 0.0
        timed_passes = _mean(s.timed_passes for s in self.phased) or 0.0
        return (fixed_s + cache_s + warmup_s + timed_passes * pass_s) / 60.0

    def forecast(self, starts: Sequence[Start], empty: bool = False) -> float:
        """Minutes ``starts`` should cost; with ``empty`` (the engine's caches are empty now) the first cold one is
        priced as a start into empty caches."""
        first = next((i for i, s in enumerate(starts) if s[1]), None) if empty else None
        return sum(self.price(s, empty=i == first) for i, s in enumerate(starts))


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
    minutes = options.budget_minutes or 0.0  # set whenever top-k follows the minutes (top_k_follows_minutes)
    return options.top_k_for(minutes / warm if warm > 0 else 0)


def restart_plan(ledger: Ledger, space: SearchSpace, options: StudyOptions,
                 candidates: Sequence[Candidate] | None = None, reserved: float = 0.0) -> RestartPlan | None:
    """Verification's restarts as the study would plan them now (:func:`autotune.study._planning.plan_for`), at the
    study's measured prices, within what the budget has left (less ``reserved`` minutes for starts that must come
    first); ``None`` for the fixed design. With ``candidates`` (verification starts now) the plan may take all that
    is left; during the search at most its share."""
    if not options.verify or not options.verify_planned:
        return None
    costs = StartCosts.of(ledger)
    base_key = space.baseline().key()
    lead = next((c.config.key() for c in candidates or () if c.role != BASELINE), None)
    price = (costs.price((lead, False)), costs.price((base_key, False))) if costs.warm else None
    used, minutes = ledger.budget_used()
    left_minutes = None if options.budget_minutes is None else options.budget_minutes - minutes - reserved
    left_starts = None if options.budget_restarts is None else options.budget_restarts - used
    top_k = len([c for c in candidates or () if c.role != BASELINE and not c.runner_up]) or _verify_top_k(ledger,
                                                                                                        options)
    return plan_for(ledger, space, options, top_k, candidates, left_minutes, left_starts, price,
                    final=candidates is not None)


def _verify_plan(ledger: Ledger, space: SearchSpace, options: StudyOptions) -> list[Start]:
    """Verification's share: the baseline and ``top_k`` configurations, the restarts the noise plan gives each side
    (``verify_restarts`` each in the fixed design), and with several compile caches one cold start per verified
    configuration and other cache. The runner-up (:func:`_candidates`) gets no share: it runs on a start the search
    left over."""
    if not options.verify:
        return []
    top_k = _verify_top_k(ledger, options)
    plan = restart_plan(ledger, space, options)
    n_c, n_b = (options.verify_restarts, options.verify_restarts) if plan is None else (plan.challenger, plan.baseline)
    base = space.baseline().key()
    starts: list[Start] = [(base, False)] * n_b + [(None, False)] * (n_c * top_k)
    others = min(options.verify_restarts, max(0, ledger.compile_caches() - 1))
    keys: list[str | None] = [base, *([None] * top_k)]
    return starts + [(key, True) for key in keys for _ in range(others)]


def _runner_up_starts(ledger: Ledger) -> list[Start]:
    """The runner-up's share of verification: its first-round restart, and with several compile caches a cold
    start before it (the round may run in a cache its configuration never ran in)."""
    return [_ANY_KEY_COLD] * (ledger.compile_caches() > 1) + [_ANY_KEY_WARM]


def _entry_starts(options: StudyOptions, verdict: ColdVerdict) -> list[Start]:
    """A new configuration's first starts: its cold start, its first counted restarts (the cold one among them when
    the study's cold starts count)."""
    return [_ANY_KEY_COLD] + [_ANY_KEY_WARM] * (options.policy.min_restarts - (1 if verdict.counts else 0))


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


def check_budget(ledger: Ledger, space: SearchSpace, options: StudyOptions, least_start_s: float = 0.0) -> None:
    """Refuse a budget too small for :func:`minimum_plan`, naming the smallest one that would do.

    A restart budget is checked before anything runs. A minutes budget needs to know what a start costs: it is
    checked before anything runs when the study has a warm start on record (a resume), else as soon as one has
    been measured (the first baseline's second start); before that, against ``least_start_s``, the fewest
    seconds the engine says any start takes (:meth:`~autotune.engines.EngineBackend.least_start_s`; issue 32:
    ``--budget-minutes 1`` on the GB10 recipe ran 22.9 engine-minutes for nothing). Once a search trial has
    finished it is past the minimum and never refused.

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
        # A warm start priced at the cold one would refuse budgets that suffice (the 26 minutes): until one
        # is measured, only the engine's least start is sure.
        need = len(plan) * least_start_s / 60.0
        if need > options.budget_minutes:
            raise BudgetTooSmall(f"--budget-minutes {options.budget_minutes:g} is too small for {what} ({len(plan)} "
                                 f"engine starts of at least {least_start_s:g} s each, the least one start of this "
                                 f"engine takes): use --budget-minutes {math.ceil(need)} or more")
        return
    need = costs.forecast(plan)
    if need > options.budget_minutes:
        cold = costs.price((None, True)) * 60.0
        warm = costs.price((None, False)) * 60.0
        raise BudgetTooSmall(f"--budget-minutes {options.budget_minutes:g} is too small for {what} ({len(plan)} "
                             f"engine starts at the measured {cold:.0f} s per cold start and {warm:.0f} s per warm "
                             f"one): use --budget-minutes {math.ceil(need)} or more")


def _search_may_start(ledger: Ledger, options: StudyOptions, extra: Sequence[Start],
                      space: SearchSpace | None = None, empty: bool = False) -> bool:
    """Whether the ``extra`` search starts fit the budget, with verification's share and every running trial's
    announced starts (this worker's included) held back; ``empty``: the engine's caches are empty now (its next
    cold start compiles what every configuration shares)."""
    used, minutes = ledger.budget_used()
    in_flight = ledger.starts_in_flight(unplanned=options.policy.min_restarts)
    if options.budget_restarts is not None:
        plan = restart_plan(ledger, space, options) if space is not None else None
        held = in_flight + (options.verify_reserve if plan is None else plan.starts)
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
        need = costs.forecast([*extra, *reserve, *[(None, False)] * in_flight] if costs.warm else [*extra], empty)
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

