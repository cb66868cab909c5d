"""The verification phase: rounds of fresh restarts of the chosen configurations and the baseline, then the
conclusion.

One loop (:class:`VerificationLoop`) runs it for the study, for the coverage benchmark and for the tests. What
differs between them is where rounds are taken and recorded (a :class:`RoundBook`): the study's ledger and claims,
so that several workers share the rounds and a resume runs nothing twice (:class:`_StudyRounds`), or memory for a
single process (:mod:`autotune.study._memory_rounds`: ``MemoryRounds``, behind ``run_verification``). Who runs which round is decided by the
pure rules of :mod:`autotune.decisions.verification`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from optuna.trial import FrozenTrial

from autotune.records import decode
from autotune.config.space import SearchSpace
from autotune.core.records import RestartResult, Workload
from autotune.decisions.planning import RestartPlan
from autotune.stats.intervals import PairPrior
from autotune.decisions.sequential import BUDGET as BUDGET_STOP
from autotune.decisions.sequential import DEFAULT_MARGIN, SequentialPlan
from autotune.decisions.verification import (
    BASELINE,
    Candidate,
    Rounds,
    SearchEvidence,
    Verification,
    conclude,
    round_participants,
)
from autotune.decisions.verification import select_candidates as select_verified
from autotune.engines import RestartEngine
from autotune.store.claims import StartTokens
from autotune.store.ledger import VERIFY_CONCLUDE_JOB, Ledger
from autotune.study._budget import (
    StartCosts, _runner_up_starts, _starts_fit, _verify_may_start, _verify_plan, _verify_top_k, restart_plan,
)
from autotune.study._planning import verification_counts
from autotune.study._floor import infeasible_keys
from autotune.study._outputs import baseline_reference, judge_outputs
from autotune.study import _sequential
from autotune.study._restart import measure_restart
from autotune.study.schedule import with_schedule
from autotune.study.events import StudyContext, StudyObserver, notify
from autotune.study.options import StudyOptions

__all__ = ["RoundBook", "RoundClaim", "VerificationLoop", "restart_runner", "select_candidates"]

#: Runs one counted restart of a candidate for a round (a cold warm-up before it when the engine starts cold) and
#: hands every restart to the callback as it lands: ``run_restart(candidate, round, on_result)``.
RunRestart = Callable[[Candidate, int, Callable[[RestartResult], None]], object]


class RoundClaim(Protocol):
    """A round (or the conclusion) held by this process until :meth:`complete`."""

    def record_restarts(self, restarts: Mapping[str, Sequence[RestartResult]]) -> None:
        """Store what this holder ran in the round so far, by config key (before the next restart starts)."""

    def complete(self) -> None:
        """The round is done."""

    def give_up(self) -> None:
        """The round is not done, and this process stops holding it: what it recorded stays, and the next holder
        (a resume, another worker) runs the rest at once instead of waiting out this holder's heartbeat."""


class RoundBook(Protocol):
    """Where verification rounds are taken and recorded."""

    def concluded(self) -> bool:
        """The phase has its conclusion (here or in another process)."""

    def refresh(self) -> None:
        """Free the rounds whose holder is gone, before looking at which are done."""

    def round_done(self, rnd: int) -> bool: ...

    def try_round(self, rnd: int) -> RoundClaim | None:
        """Take round ``rnd`` if no one holds it or did it; ``None`` otherwise."""

    def wait_round(self, rnd: int) -> RoundClaim | None:
        """Take round ``rnd``, waiting while another holds it; ``None`` when another ran it."""

    def wait_conclusion(self) -> RoundClaim | None:
        """Take the conclusion, waiting while another holds it; ``None`` when another concluded."""

    def idle(self) -> None:
        """Every round left is held by another process: wait a while."""

    def rounds(self) -> Rounds:
        """Every verification restart so far, by round."""

    def record_verification(self, verification: Verification) -> None:
        """Store the conclusion (under the conclusion's claim)."""

    def sequential_plan(self) -> SequentialPlan | None:
        """The sequential design, once fixed (:mod:`autotune.study._sequential`)."""

    def record_sequential_plan(self, plan: SequentialPlan) -> None:
        """Fix the sequential design for every process and resume."""


def restart_runner(engine: RestartEngine, workload: Workload, seed_for: Callable[[int], int],
                   run_again: Callable[[Candidate], bool] | None = None,
                   tokens: StartTokens | None = None) -> RunRestart:
    """:data:`RunRestart` on ``engine``: round ``r`` on seed ``seed_for(r)``, the same for every configuration in the
    round (matched restarts). A restart that failed transiently (the memory guard, a lost restart) is run once more
    when ``run_again(candidate)`` says the budget and the floor rule allow it, as in the search
    (:func:`measure_restart`): a passing fault never costs a configuration, the baseline included, its place.
    ``tokens``: the study's start tokens (every start takes one first, :class:`autotune.store.claims.StartTokens`)."""

    def run(candidate: Candidate, rnd: int, on_result: Callable[[RestartResult], None]) -> object:
        return measure_restart(engine, candidate.config, workload, restart=rnd, seed=seed_for(rnd),
                               on_result=on_result,
                               run_again=None if run_again is None else (lambda _failed: run_again(candidate)),
                               tokens=tokens)

    return run


@dataclasses.dataclass
class VerificationLoop:
    """The verification phase: the common rounds, the near-tie rounds, the conclusion.

    The common rounds (``common`` of them) may run at once in as many processes, except that with a runner-up the
    rounds after the first wait for it (who runs them is decided on it, :func:`round_participants`); the near-tie
    rounds after them each depend on the rounds before, so they run one at a time, up to ``cap``, each only when
    ``may_start`` allows the starts it still needs. Who runs round ``r`` depends only on the restarts of rounds
    before ``r``, so a resumed phase makes the same choices and runs nothing twice.

    Attributes:
        candidates: Configurations to verify; exactly one has role ``baseline``.
        book: Where rounds are taken and recorded.
        run_restart: How one restart runs (:func:`restart_runner`).
        common: Counted restarts every configuration gets.
        cap: Cap on counted restarts of a near-tie (``common``: no extra rounds).
        may_start: Whether the restarts of these candidates still to run fit the budget (default: always).
        on_restart: Called with every restart as it lands, after it is recorded.
        sequential_rounds: Most rounds of the winner and the baseline after the verification rounds, while its
            verdict is open (:mod:`autotune.study._sequential`); 0: a fixed design.
        margin: Equivalence margin that ends the sequential rounds.
        rounds_fit: ``rounds_fit(pair, most)``: how many such rounds the budget pays for at the first look
            (default: ``most``).
        baseline_restarts: Counted restarts of the baseline in the common rounds (default: ``common``, as every
            challenger); the common rounds are as many as the larger count, each side spread over them
            (:func:`autotune.decisions.verification.scheduled`).
        extension_share: The share of ``alpha`` kept for the sequential rounds after the first look, which then
            runs at the rest (a planned verification: the first look is the planned test, and a later resume with a
            larger budget may extend an open verdict, :class:`~autotune.decisions.sequential.SequentialPlan`); 0:
            the Lan-DeMets design over every look, its rounds sized by the budget at the first look.
        plan: The restart plan the counts came from (stored with the conclusion, for the report).
        extension: Which extension of the verification this run concludes (0: the first conclusion).
    """

    candidates: Sequence[Candidate]
    book: RoundBook
    run_restart: RunRestart
    common: int
    cap: int
    confidence: float = 0.95
    interval_method: str = "t"
    alpha: float = 0.05
    slo: Mapping[str, float] | None = None
    unit: str = "tok/s"
    may_start: Callable[[Sequence[Candidate]], bool] | None = None
    on_restart: Callable[[Candidate, RestartResult], None] | None = None
    sequential_rounds: int = 0
    margin: float = DEFAULT_MARGIN
    rounds_fit: Callable[[Sequence[Candidate], int], int] | None = None
    baseline_restarts: int | None = None
    extension_share: float = 0.0
    plan: RestartPlan | None = None
    extension: int = 0
    #: ``infeasible(keys)``: those the memory floor rule made infeasible (two hits, search and verification
    #: together): like a failed configuration, they get no more starts (a guard trip alone is no failure).
    infeasible: Callable[[Sequence[str]], set[str]] | None = None
    #: Compare each challenger with the baseline round by round (issue 41; :func:`conclude`'s ``paired``).
    paired: bool = False
    #: Seeds the order of each round (a round's participants run in an order drawn from it, so a drift inside the
    #: round favours no side); ``None``: the candidates' order (A B C base), as before.
    order_seed: int | None = None
    #: ``round_fits(todo)``: whether the budget still pays for a planned round's starts now (a study's budget, which
    #: starts lost after the plan can leave short); ``None``: planned rounds always run, as the plan fitted them.
    round_fits: Callable[[Sequence[Candidate]], bool] | None = None

    @property
    def pair_prior(self) -> PairPrior | None:
        """The plan's prior for a round's log-ratio variance (the paired analysis moderates by it); ``None`` without
        a plan, or a plan stored before it."""
        return self.plan.pair_prior if self.paired and self.plan is not None else None

    @property
    def common_rounds(self) -> int:
        """The common rounds: as many as the side with more counted restarts."""
        return max(self.common, self.baseline_restarts or self.common)

    @property
    def tie_end(self) -> int:
        """The first round after the near-tie rounds (where the sequential rounds begin)."""
        return self.common_rounds + max(0, self.cap - self.common)

    def run(self) -> Verification | None:
        """Run this process's share of the phase. Returns the verification if this process concluded it."""
        self._common_rounds()
        self._near_tie_rounds()
        _sequential.sequential_rounds(self)
        return self._conclude()

    def _participants(self, rnd: int) -> list[Candidate] | None:
        return round_participants(self.candidates, self.book.rounds().progress(), rnd, self.common, self.confidence,
                                  self.baseline_restarts)

    def _common_rounds(self) -> None:
        book = self.book
        cut_waits = any(c.runner_up for c in self.candidates)
        while not book.concluded():
            book.refresh()
            pending = [r for r in range(self.common_rounds) if not book.round_done(r)]
            if not pending:
                return
            ready = [r for r in pending if r == 0 or not cut_waits or book.round_done(0)]
            for rnd in ready:
                claim = book.try_round(rnd)
                if claim is not None:
                    participants = self._participants(rnd)
                    assert participants is not None  # only the near-tie rounds after the common ones can be skipped
                    if self._round_fits(participants, rnd):
                        with _given_up_unless_done(claim):
                            self._run_round(participants, rnd, claim)
                    claim.complete()
                    break
            else:
                book.idle()  # every pending round is held by a live worker

    def _near_tie_rounds(self) -> None:
        for rnd in range(self.common_rounds, self.tie_end):
            if self.book.concluded():
                return
            participants = self._participants(rnd)
            if participants is None:
                return  # the leading challenger is settled: more restarts would not change the winner
            claim = self.book.wait_round(rnd)
            if claim is None:
                continue  # another worker ran this round
            todo = self._todo(participants, rnd)
            if todo and (self.may_start is None or self.may_start(todo)):
                with _given_up_unless_done(claim):
                    self._run_round(todo, rnd, claim)
            # A round the budget leaves out stays empty: the next one finds no tie to break.
            claim.complete()

    def _round_fits(self, participants: Sequence[Candidate], rnd: int) -> bool:
        """Whether the budget pays for what is left of planned round ``rnd`` (:attr:`round_fits`). The plan fitted
        its rounds to the budget, but starts can be lost after it (a worker killed mid-restart spent one). Paired, a
        round counts only where both sides ran, so one the budget cannot pay for whole is left out rather than half
        run: its lone restart would be a start spent for nothing. Unpaired, each restart counts alone and runs while
        it fits."""
        if not self.paired or self.round_fits is None:
            return True
        todo = self._todo(participants, rnd)
        return not todo or self.round_fits(todo)

    def _todo(self, participants: Sequence[Candidate], rnd: int) -> list[Candidate]:
        """The participants still to run round ``rnd``: not measured in it yet (an earlier holder may have), and
        never failed (a broken configuration gets no more starts)."""
        rounds = self.book.rounds()
        failed = rounds.failed()
        base = next((c.config.key() for c in self.candidates if c.role == BASELINE), None)
        if self.paired and base in failed and not _baseline_broken(rounds.progress().get(base, ())):
            # The baseline is the reference every pair needs: a failure of it is data (stated in the report), and
            # it runs on unless most of its restarts fail (issue 44: a verdict from the rounds that ran).
            failed.discard(base)
        if self.infeasible is not None:
            failed |= self.infeasible([c.config.key() for c in participants])
        done = rounds.round(rnd)
        return [c for c in participants if c.config.key() not in failed
                and not any(r.ok and not r.cold for r in done.get(c.config.key(), ()))]

    def _run_round(self, participants: Sequence[Candidate], rnd: int, claim: RoundClaim) -> None:
        """Round ``rnd`` here: one counted restart of every participant still to run it, in order (A B C base), on
        the round's seed; what an earlier holder of the round ran is kept."""
        mine: dict[str, list[RestartResult]] = {}
        for cand in self._ordered(self._todo(participants, rnd), rnd):

            def record(result: RestartResult, cand: Candidate = cand) -> None:
                mine.setdefault(cand.config.key(), []).append(result)
                claim.record_restarts(mine)
                if self.on_restart is not None:
                    self.on_restart(cand, result)

            self.run_restart(cand, rnd, record)

    def _ordered(self, todo: Sequence[Candidate], rnd: int) -> list[Candidate]:
        """``todo`` in the round's order: drawn from ``order_seed`` and the round, so every worker and a resume run
        a round in the same order, and the baseline is not always last (a level that drifts inside a round would
        then always favour the same side)."""
        if self.order_seed is None or len(todo) < 2:
            return list(todo)
        rng = random.Random(self.order_seed * 1_000_003 + rnd)
        order = sorted(todo, key=lambda c: c.config.key())  # the candidates' own order may differ by worker
        rng.shuffle(order)
        return order

    def _conclude(self) -> Verification | None:
        claim = None if self.book.concluded() else self.book.wait_conclusion()
        if claim is None:
            return None
        verification = conclude(self.candidates, self.book.rounds().progress(), self.common, self.confidence,
                                self.interval_method, self.alpha, max_restarts=self.cap, slo=self.slo or {},
                                unit=self.unit, sequential=self.book.sequential_plan(), paired=self.paired,
                                pair_prior=self.pair_prior)
        verification = dataclasses.replace(verification, plan=self.plan, baseline_restarts=self.baseline_restarts,
                                           extension=self.extension)
        self.book.record_verification(verification)
        claim.complete()
        return verification


def _baseline_broken(results: Sequence[RestartResult]) -> bool:
    """The baseline failed in at least two restarts and in more than half of them: a reference that cannot be
    measured, which gets no more starts."""
    failed = sum(1 for r in results if not r.ok)
    return failed >= 2 and 2 * failed > len(results)


@contextlib.contextmanager
def _given_up_unless_done(claim: RoundClaim) -> Iterator[None]:
    """Give ``claim`` up when its round ends in an exception (Ctrl-C, a signal, a broken store): a resume in this
    same process, or another worker, then takes the round over at once (a holder whose process lives on is
    otherwise only judged by its heartbeat's grace period). The exception goes on unchanged."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            claim.give_up()
        raise


# -- the study's rounds: the ledger and its claims -------------------------------------------------------------


class _StudyRounds:
    """The study's round book: each round and the conclusion a claim, restarts stored on the round's claim as they
    land, so several workers share the rounds and a resume runs nothing twice."""

    def __init__(self, ctx: StudyContext, observers: Sequence[StudyObserver], extension: int = 0) -> None:
        self.ctx, self.observers = ctx, observers
        self.ledger, self.claims = ctx.ledger, ctx.claims
        #: Each extension concludes under a claim of its own (the first conclusion's is done).
        self.conclude_job = VERIFY_CONCLUDE_JOB if extension == 0 else f"{VERIFY_CONCLUDE_JOB}-{extension}"

    def concluded(self) -> bool:
        return self.ledger.has_verification()

    def refresh(self) -> None:
        self.claims.refresh()

    def round_done(self, rnd: int) -> bool:
        return self.claims.done(self.ledger.verify_round_job(rnd))

    def try_round(self, rnd: int) -> RoundClaim | None:
        return self.claims.try_claim(self.ledger.verify_round_job(rnd))

    def wait_round(self, rnd: int) -> RoundClaim | None:
        return self.claims.wait_for(self.ledger.verify_round_job(rnd), self.ctx.poll_s, self.ctx.sleep)

    def wait_conclusion(self) -> RoundClaim | None:
        return self.claims.wait_for(self.conclude_job, self.ctx.poll_s, self.ctx.sleep)

    def idle(self) -> None:
        self.ctx.sleep(self.ctx.poll_s)

    def rounds(self) -> Rounds:
        """The rounds' claims, after what a single-process autotune of an earlier version stored for a study it
        verified in part."""
        legacy = {k: [decode(RestartResult, d) for d in v] for k, v in self.ledger.verify_progress().items()}
        return Rounds.from_progress(legacy).merged(Rounds.from_stored(self.ledger.verify_rounds()))

    def sequential_plan(self) -> SequentialPlan | None:
        return self.ledger.verify_sequential()

    def record_sequential_plan(self, plan: SequentialPlan) -> None:
        self.ledger.record_verify_sequential(plan)

    def record_verification(self, verification: Verification) -> None:
        self.ledger.record_verification(verification)
        self.ctx.concluded = True
        notify(self.observers, lambda o: o.on_verification_end(self.ctx, verification))


#: The share of a planned verification's error rate kept for the rounds after its first look (empirical: a fifth
#: keeps the planned look's interval within about 3% of the width it would have at the full rate, and leaves an
#: open verdict something to extend with).
EXTENSION_SHARE = 0.2


def _verify(ctx: StudyContext, observers: Sequence[StudyObserver]) -> Verification | None:
    """The study's verification rounds, spread over its workers (one claim per round); the conclusion by exactly one
    worker. Returns the verification if this worker concluded it, else ``None``.

    A planned study (:attr:`StudyOptions.verify_planned`) gives each side the restarts its plan says, fixed when
    verification starts (:func:`_restart_plan`); a concluded, open verdict that stopped for the budget is extended
    when the study is resumed with a budget that pays for more of its rounds (:func:`extension_due`)."""
    options, ledger = ctx.options, ctx.ledger
    candidates = _candidates(ctx)
    plan = _restart_plan(ctx, candidates)
    common, base_n = verification_counts(plan, options)
    extension = ledger.verify_extension()
    if ledger.has_verification() and extension_due(ctx):
        extension += 1
        ledger.record_verify_extension(extension)
    loop = VerificationLoop(
        candidates, _StudyRounds(ctx, observers, extension),
        _budgeted_runner(ctx, restart_runner(ctx.engine, verify_workload(ctx.space.workload, plan), options.verify_seed,
                                             lambda cand: _may_run_again(ledger, options, cand),
                                             ctx.start_tokens)), common,
        max(common, options.verify_max_restarts or common), options.confidence, options.interval_method,
        slo=ctx.space.slo_constraints, unit=ctx.space.workload.unit,
        may_start=lambda todo: _verify_may_start(ledger, options, todo),
        on_restart=lambda cand, result: notify(observers, lambda o: o.on_restart(ctx, "verify",
                                               f"verify {cand.config.label()}", result)),
        sequential_rounds=options.verify_sequential_rounds, margin=options.verify_margin,
        rounds_fit=lambda pair, most: _sequential.rounds_fit(ledger, options, pair, most),
        baseline_restarts=base_n if plan is not None else None,
        extension_share=EXTENSION_SHARE if plan is not None else 0.0, plan=plan,
        extension=extension, infeasible=lambda keys: infeasible_keys(ledger, keys),
        # Rounds are blocks: analysed by round unless a stored plan from before issue 41 gave the sides unequal,
        # spread-out restarts (it concludes as it was planned).
        paired=plan is None or plan.paired, order_seed=options.seed,
        round_fits=lambda todo: _verify_may_start(ledger, options, todo))
    return loop.run()


def verify_workload(workload: Workload, plan: RestartPlan | None) -> Workload:
    """The workload of verification's restarts: the search's, with the timed passes the plan sized for them."""
    if plan is None or plan.timed_passes is None or plan.timed_passes == workload.timed_passes:
        return workload
    return dataclasses.replace(workload, timed_passes=plan.timed_passes)


def _restart_plan(ctx: StudyContext, candidates: Sequence[Candidate]) -> RestartPlan | None:
    """The stored plan, or the one made now from the chosen candidates' search restarts and stored for every worker
    and resume. What the budget has left is priced first for the starts that must come before any counted one: a
    cold start per configuration when the engine's caches are empty (a fresh machine), the first of them at what the
    study's own starts into empty caches cost."""
    ledger, options = ctx.ledger, ctx.options
    stored = ledger.verify_plan()
    if stored is not None or not options.verify or not options.verify_planned:
        return stored
    empty = bool(ctx.engine.caches_empty())
    cold = [(c.config.key(), True) for c in candidates if not c.runner_up] if empty else []
    plan = restart_plan(ledger, ctx.space, options, candidates, reserved=StartCosts.of(ledger).forecast(cold, empty))
    if plan is not None:
        ledger.record_verify_plan(plan)
    return plan


def _budgeted_runner(ctx: StudyContext, run: RunRestart) -> RunRestart:
    """``run``, but no engine starts once the study's budget cannot pay for one more warm restart: a study overruns
    its budget by at most the one restart it started within it (a round the budget cut short counts what ran)."""
    ledger, options = ctx.ledger, ctx.options

    def fits(candidate: Candidate) -> bool:
        return _starts_fit(ledger, options, [(candidate.config.key(), False)])

    def budgeted(candidate: Candidate, rnd: int, on_result: Callable[[RestartResult], None]) -> object:
        if options.budget_minutes is None and options.budget_restarts is None:
            return run(candidate, rnd, on_result)
        if not fits(candidate):
            return None
        return run(candidate, rnd, on_result)

    return budgeted


def extension_due(ctx: StudyContext) -> bool:
    """Whether a concluded verification is open and stopped for the budget, and the budget now pays for another of
    its sequential rounds (a resume with a larger ``--budget-minutes``)."""
    ledger, options = ctx.ledger, ctx.options
    verification = ledger.verification()
    design = ledger.verify_sequential()
    if verification is None or design is None or design.first_alpha <= 0.0 or verification.sequential is None:
        return False
    look = verification.sequential
    if look.stopped != BUDGET_STOP or look.look >= look.looks:
        return False
    pair = [e.candidate for e in verification.entries
            if e.candidate.config.key() == design.winner or e.candidate.role == BASELINE]
    return _starts_fit(ledger, options, [(c.config.key(), False) for c in pair])


def _may_run_again(ledger: Ledger, options: StudyOptions, candidate: Candidate) -> bool:
    """Whether a verification restart of ``candidate`` that failed transiently runs again: the floor rule has not
    made it infeasible (two hits, search and verification together) and one more warm start fits the budget."""
    key = candidate.config.key()
    return not infeasible_keys(ledger, [key]) and _starts_fit(ledger, options, [(key, False)])


# -- choosing the candidates -----------------------------------------------------------------------------------


def select_candidates(ledger: Ledger, space: SearchSpace, top_k: int, runner_up: bool = False) -> list[Candidate]:
    """Up to top-k engine plans by shrunk search estimate (and a runner-up), then the baseline (see
    :func:`select_verified`)."""
    evidence = []
    complete = ledger.measured_complete()
    # A configuration that hit the memory floor twice (search and verification together) is never a winner.
    unsafe = infeasible_keys(ledger, (k for t in complete if (k := ledger.config_key(t)) is not None))
    complete = [t for t in complete if ledger.config_key(t) not in unsafe]
    # Under latency limits only configurations that met them are candidates, as long as any did: a fast one that
    # misses a limit cannot win, and verifying it would take a slot from one that can.
    feasible = [t for t in complete if _feasible(t)]
    reference = baseline_reference(ledger, space)
    for t in feasible or complete:
        summary = ledger.summary(t)
        config = ledger.config(t)
        # Outputs that differ from the baseline's cannot win, whatever else does (autotune.decisions.outputs).
        if config is not None and judge_outputs(ledger, space, config, ledger.restarts(t), reference).differs:
            continue
        if summary is not None and summary.values and config is not None:
            evidence.append(SearchEvidence.from_summary(t.number, config, summary))
    return select_verified(evidence, space.baseline(), top_k, runner_up)



def _runnable(space: SearchSpace, candidate: Candidate) -> Candidate:
    """The candidate with its configuration rebuilt from the space: stored ones have their credentials redacted."""
    config = space.baseline() if candidate.role == BASELINE else space.config_from_params(candidate.config.params)
    if config.key() != candidate.config.key():
        raise RuntimeError(f"verification candidate {candidate.config.label()} no longer matches the space "
                           "it was chosen from")  # the study fingerprint check stops edited spaces before this
    return dataclasses.replace(candidate, config=config)


def _feasible(trial: FrozenTrial) -> bool:
    """Optuna's record of whether the trial met every constraint (True when the study has none)."""
    return all(v <= 0.0 for v in trial.constraints.values())


def _candidates(ctx: StudyContext) -> list[Candidate]:
    """The configurations to verify, chosen once. Every worker that gets here chooses the same ones (the search
    is over, so the trials they choose from are the same); the first to store them fixes them for resumes."""
    ledger = ctx.ledger
    candidates = ledger.verify_candidates()
    if candidates is None:
        # A runner-up for the first round (autotune.decisions.verification.first_round_cut) when a start is left over for it: the
        # search stops once a new configuration's cold and warm starts no longer fit, which often leaves one. It
        # is the cheapest evidence that can change the pick (docs/benchmarks.md); it takes nothing from the search.
        options = ctx.options
        runner_up = options.verify_restarts >= 1 and _starts_fit(ledger, options, [
            *_verify_plan(ledger, ctx.space, options), *_runner_up_starts(ledger)])
        candidates = select_candidates(ledger, ctx.space, _verify_top_k(ledger, options), runner_up)
        # With load levels: a K schedule of the levels' best K, beside the best fixed K (autotune.study.schedule).
        candidates = with_schedule(ledger, ctx.space, candidates)
        ledger.record_verify_candidates(candidates)
    return [_runnable(ctx.space, c) for c in candidates]

