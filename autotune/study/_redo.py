"""A verification that lost a configuration to a transient fault is not final (issue 32, principle 4).

A verification restart the memory guard killed (or one lost with the forkserver host) is run once more as it
happens (:func:`autotune.study._restart.measure_restart`). A study can still have concluded without it: autotune
before issue 32 never ran it again, and the retry may not have fitted the budget then. Its verdict is then NONE
("the baseline ... was not measured"), and before this module the same command only printed it again.

:func:`redo_lost` runs, when the same command runs again, exactly the restarts such a fault cost: in each common
round, every participant with no counted restart in it, whose configuration is not broken (no failure of its own,
no second transient failure: :meth:`~autotune.decisions.verification.Rounds.failed`; not infeasible by the floor
rule) and whose restarts show a transient failure; within the budget. It runs them under one claim (``VERIFY_REDO_JOB``: several workers run them
once), each restart stored in the round it was run for, then concludes again from every round's restarts. A
study with nothing to redo starts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.core.records import RestartResult
from autotune.core.transient import is_transient
from autotune.decisions.verification import Candidate, Rounds, Verification, conclude, round_participants
from autotune.store.ledger import VERIFY_REDO_JOB
from autotune.study._budget import _starts_fit
from autotune.study._floor import infeasible_keys
from autotune.study._verification import (_candidates, _given_up_unless_done, _may_run_again, _StudyRounds,
                                          restart_runner, verify_workload)
from autotune.study.events import StudyContext, StudyObserver, notify

__all__ = ["lost_restarts", "redo_lost"]


def lost_restarts(candidates: Sequence[Candidate], rounds: Rounds, common: int,
                  confidence: float) -> list[tuple[int, Candidate]]:
    """``(round, candidate)`` of every common-round restart a transient fault cost and nothing ran again."""
    failed = rounds.failed()
    hit = {key for key, results in rounds.progress().items() if any(is_transient(r) for r in results)}
    lost = []
    for rnd in range(common):
        before = Rounds({r: dict(v) for r, v in rounds.by_round.items() if r < rnd}).progress()
        for cand in round_participants(candidates, before, rnd, common, confidence) or ():
            key = cand.config.key()
            have = rounds.round(rnd).get(key, ())
            if key in hit and key not in failed and not any(r.ok and not r.cold for r in have):
                lost.append((rnd, cand))
    return lost


def redo_lost(ctx: StudyContext, observers: Sequence[StudyObserver]) -> Verification | None:
    """Run the restarts a transient fault cost a concluded verification (see the module), then conclude again.
    Returns the new verification if this process made it, else ``None`` (nothing lost, or another worker redid it).
    """
    ledger, options = ctx.ledger, ctx.options
    stored = ledger.verification()
    if stored is None or not any(is_transient(r) for e in stored.entries for r in e.restarts):
        return None
    book = _StudyRounds(ctx, observers)
    candidates = _candidates(ctx)
    common = options.verify_restarts
    unsafe = infeasible_keys(ledger, [c.config.key() for c in candidates])  # the floor rule: never run again

    def lost() -> list[tuple[int, Candidate]]:
        return [(rnd, c) for rnd, c in lost_restarts(candidates, book.rounds(), common, options.confidence)
                if c.config.key() not in unsafe]

    if not lost():
        return None
    n = 0
    while ctx.claims.done(VERIFY_REDO_JOB.format(n)):
        n += 1
    claim = ctx.claims.wait_for(VERIFY_REDO_JOB.format(n), ctx.poll_s, ctx.sleep)
    if claim is None:
        return None  # another worker redid them
    # Concluded again as the study concluded it (verify_study): by round unless a plan from before issue 41 said
    # otherwise, its rounds' variance moderated by the plan's prior.
    plan = ledger.verify_plan()
    paired = plan is None or plan.paired
    run = restart_runner(ctx.engine, verify_workload(ctx.space.workload, plan), options.verify_seed,
                         lambda cand: _may_run_again(ledger, options, cand), ctx.start_tokens)
    mine: dict[str, list[RestartResult]] = {}
    with _given_up_unless_done(claim):
        for rnd, cand in lost():
            if not _starts_fit(ledger, options, [(cand.config.key(), False)]):
                break

            def record(result: RestartResult, cand: Candidate = cand) -> None:
                mine.setdefault(cand.config.key(), []).append(result)
                claim.record_restarts(mine)
                label = f"verify {cand.config.label()}"
                notify(observers, lambda o: o.on_restart(ctx, "verify", label, result))

            run(cand, rnd, record)
        verification = conclude(candidates, book.rounds().progress(), common, options.confidence,
                                options.interval_method, max_restarts=max(common, options.verify_max_restarts or common),
                                slo=ctx.space.slo_constraints or {}, unit=ctx.space.workload.unit,
                                sequential=book.sequential_plan(), paired=paired,
                                pair_prior=plan.pair_prior if plan is not None and paired else None)
        book.record_verification(verification)
    claim.complete()
    return verification
