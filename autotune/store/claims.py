"""Claims: "exactly one worker does this" through the study's own storage, with takeover when the holder dies.

A study shared by several workers has jobs that must run once: creating the MLflow parent run, each
verification round, concluding the verification. A claim is a trial in a companion Optuna study (the study's
name plus :data:`CLAIMS_SUFFIX`, hidden from listings) created in one storage transaction, RUNNING, carrying
the job's name. The holder of a job is the lowest-numbered claim for it that is RUNNING or COMPLETE:

* Optuna numbers a study's trials under a lock on the study, so numbers follow creation order; a worker that
  created its claim and then reads the claims sees every claim created before its own. Two workers that claim
  at once both see the earlier claim and agree on it: no job has two holders.
* The holder's :class:`~autotune.store.heartbeat.Heartbeat` keeps its claim alive. When the holder dies the claim's
  heartbeat goes stale, :func:`optuna.storages.fail_stale_trials` fails it, and the next claimant becomes the
  holder: a lease, renewed by heartbeat and taken over when stale.
* A COMPLETE claim means the job is done; losing claims are finished as PRUNED at once.

What a job wrote so far (the restarts of a verification round) is stored on its claim trial, so a new holder
continues where a dead one stopped, nothing lost and nothing counted twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.store.heartbeat import Heartbeat
from autotune.store.ledger import CLAIMS_SUFFIX, claim_attrs, claim_holder_gone, claim_job, record_claim_restarts
from autotune.core.records import RestartResult

__all__ = ["MINUTES_JOB", "START_JOB", "Claim", "Claims", "StartToken", "StartTokens"]

#: The claims that make up the engine-start budget: ``start-<i>``, one per engine start (:class:`StartTokens`).
START_JOB = "start-"
#: A reservation of engine minutes under ``--budget-minutes``: ``minutes-<estimate>``, one per engine start, the
#: minutes it reserved in its name and, once complete, the minutes it took as its value (:class:`StartTokens`).
MINUTES_JOB = "minutes-"

_LIVE = (TrialState.RUNNING, TrialState.COMPLETE)


@dataclasses.dataclass
class Claim:
    """A job this process holds. Finish it with :meth:`complete` (done) or :meth:`give_up` (someone else may)."""

    claims: Claims
    job: str
    trial_id: int
    number: int

    def record_restarts(self, restarts: Mapping[str, Sequence[RestartResult]]) -> None:
        """The restarts this holder ran for the job so far, by config key (a later holder reads them through
        :meth:`autotune.store.ledger.Ledger.verify_rounds`)."""
        record_claim_restarts(self.claims.storage, self.trial_id, restarts)

    def complete(self, value: float = 0.0) -> None:
        """Done; ``value`` is what it cost where that counts (a minutes reservation: the minutes the start took)."""
        self.claims.heartbeat.release(self.trial_id)
        self.claims.storage.set_trial_state_values(self.trial_id, TrialState.COMPLETE, [float(value)])

    def give_up(self) -> None:
        self.claims.heartbeat.release(self.trial_id)
        self.claims.storage.set_trial_state_values(self.trial_id, TrialState.FAIL)


class Claims:
    """The claims of one study.

    Args:
        study: The (main) study.
        heartbeat: This process's heartbeat; it keeps held claims alive.
    """

    def __init__(self, study: optuna.Study, heartbeat: Heartbeat, owner: Mapping[str, Any]) -> None:
        self.storage = study._storage
        self.heartbeat = heartbeat
        self.owner = dict(owner)
        self.study = optuna.create_study(study_name=study.study_name + CLAIMS_SUFFIX, storage=self.storage,
                                         direction="maximize", load_if_exists=True)

    def _claims(self, job: str) -> list[FrozenTrial]:
        return [t for t in self.study.get_trials(deepcopy=False) if claim_job(t) == job]

    def refresh(self) -> None:
        """Fail claims whose holder stopped beating, or whose holder's process on this machine is gone, so their
        jobs can be taken over. The second is what lets ``kill -9`` and the same command again go on at once
        instead of waiting out the heartbeat's grace period; a holder on another machine can only be judged by
        its heartbeat."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if claim_holder_gone(t):
                # Another claimant may have failed it first.
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)

    def done(self, job: str) -> bool:
        return any(t.state == TrialState.COMPLETE for t in self._claims(job))

    def held(self, job: str) -> bool:
        """Someone holds ``job`` now, or did it."""
        return any(t.state in _LIVE for t in self._claims(job))

    def try_claim(self, job: str) -> Claim | None:
        """Take ``job`` unless someone holds it or did it. ``None``: not ours (see :meth:`done`)."""
        self.refresh()
        if self.held(job):
            return None
        template = optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=claim_attrs(job, self.owner))
        trial_id = self.storage.create_new_trial(self.study._study_id, template_trial=template)
        self.heartbeat.hold(trial_id)
        number = self.storage.get_trial_number_from_id(trial_id)
        holder = min((t for t in self._claims(job) if t.state in _LIVE), key=lambda t: t.number)
        if holder.number == number:
            return Claim(self, job, trial_id, number)
        self.heartbeat.release(trial_id)
        self.storage.set_trial_state_values(trial_id, TrialState.PRUNED)
        return None

    def wait_for(self, job: str, poll_s: float, sleep: Callable[[float], None] = time.sleep) -> Claim | None:
        """Wait until ``job`` is done (``None``) or falls to this process (its :class:`Claim`)."""
        while True:
            if self.done(job):
                return None
            claim = self.try_claim(job)
            if claim is not None:
                return claim
            sleep(poll_s)


@dataclasses.dataclass
class StartToken:
    """One engine start's permission: its ``start-<i>`` token (``--budget-restarts``) and its minutes reservation
    (``--budget-minutes``), either absent without that budget. Complete it with the minutes the start took once the
    engine returned, or give it up when the engine never ran."""

    restart: Claim | None
    minutes: Claim | None

    @property
    def job(self) -> str:
        return (self.restart or self.minutes).job  # type: ignore[union-attr]

    def complete(self, minutes: float = 0.0) -> None:
        if self.restart is not None:
            self.restart.complete()
        if self.minutes is not None:
            self.minutes.complete(minutes)

    def give_up(self) -> None:
        for claim in (self.restart, self.minutes):
            if claim is not None:
                claim.give_up()


class StartTokens:
    """The engine-start budget (``--budget-restarts``) as numbered claims, so that no number of workers, however
    they race or die, starts more engines than it.

    Every engine start of a study first takes a token: the lowest free claim ``start-<i>`` with ``i`` below the
    budget, held (RUNNING, kept alive by the holder's heartbeat) while the engine runs and completed when it
    returns, before its restart is recorded. Checking the budget and taking the start is then one atomic step
    across workers: the claim's lowest-number rule gives each token one holder, so two workers that both saw room
    for the last start cannot both take it (issue 44: a check of the stored counts followed by a start let a study
    start 41 engines on a budget of 40 under load with workers killed). A holder that dies mid-start loses its
    token with its heartbeat (or at once, on its machine): its start was never recorded, and the token goes to the
    next start. A token completed by a holder that dies before recording its restart stays spent: the budget is
    then under-used by one, never overrun.

    ``--budget-minutes`` holds the same way: every start first reserves the minutes it is estimated to take
    (``price(key)``: the study's measured price of such a start, never less than the least start the engine can
    take), a claim ``minutes-<estimate>`` made in one storage transaction; it is granted when the minutes spent
    (each completed reservation's real minutes, and what was recorded before any reservation), the estimates of the
    live reservations numbered before it, and its own fit the budget. Each granted reservation counted every one
    granted before it, so two workers that both saw the last minutes free cannot both start: the study's recorded
    minutes exceed the budget by at most what its starts ran over their estimates (issue 44, principle 7). A
    reservation refused starts nothing (and gives its start token back); one whose holder died is failed like a
    token, its minutes never recorded.

    The stored counts (``Ledger.budget_used`` and what running trials announce) still plan what to start; the
    tokens only guarantee the ceiling. Starts recorded without a token (a study run by autotune before issue 44)
    are taken off the budget when the tokens are opened.

    Args:
        claims: The study's claims (this worker's heartbeat keeps its held token alive).
        budget: ``--budget-restarts`` (``None``: no start tokens).
        recorded: Engine starts the study has on record now (``Ledger.budget_used()[0]``).
        minutes: ``--budget-minutes`` (``None``: no reservations).
        recorded_minutes: Engine minutes the study has on record now (``Ledger.budget_used()[1]``).
        price: Minutes a start of a configuration key (``None``: unknown) is estimated to take.
    """

    def __init__(self, claims: Claims, budget: int | None, recorded: int = 0, *, minutes: float | None = None,
                 recorded_minutes: float = 0.0, price: Callable[[str | None], float] | None = None) -> None:
        self.claims = claims
        self.limit: int | None = None
        if budget is not None:
            spent = sum(1 for t in self._tokens() if t.state == TrialState.COMPLETE)
            self.limit = max(0, int(budget) - max(0, int(recorded) - spent))
        self.minutes = None if minutes is None else float(minutes)
        self.price = price or (lambda key: 0.0)
        reserved = sum(_spent(t) for t in self._reservations() if t.state == TrialState.COMPLETE)
        self.base_minutes = max(0.0, float(recorded_minutes) - reserved)

    def _tokens(self) -> list[FrozenTrial]:
        return [t for t in self.claims.study.get_trials(deepcopy=False)
                if (claim_job(t) or "").startswith(START_JOB) and (claim_job(t) or "")[len(START_JOB):].isdigit()]

    def _reservations(self) -> list[FrozenTrial]:
        return [t for t in self.claims.study.get_trials(deepcopy=False)
                if (claim_job(t) or "").startswith(MINUTES_JOB)]

    def take(self, key: str | None = None) -> StartToken | None:
        """Permission for one engine start of configuration ``key`` (complete it with the minutes the start took
        once the engine returned, give it up if it did not), or ``None``: the budget has no room for it."""
        restart = self._take_restart() if self.limit is not None else None
        if self.limit is not None and restart is None:
            return None
        minutes = self._reserve(max(0.0, float(self.price(key)))) if self.minutes is not None else None
        if self.minutes is not None and minutes is None:
            if restart is not None:
                restart.give_up()  # the start does not happen: its token goes to the next one
            return None
        return StartToken(restart, minutes)

    def _reserve(self, estimate: float) -> Claim | None:
        """A reservation of ``estimate`` minutes, or ``None`` when the budget has no room for it (see above)."""
        claims = self.claims
        claims.refresh()
        job = f"{MINUTES_JOB}{estimate!r}"
        template = optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=claim_attrs(job, claims.owner))
        trial_id = claims.storage.create_new_trial(claims.study._study_id, template_trial=template)
        claims.heartbeat.hold(trial_id)
        number = claims.storage.get_trial_number_from_id(trial_id)
        used = self.base_minutes
        for t in self._reservations():
            if t.state == TrialState.COMPLETE:
                used += _spent(t)
            elif t.state == TrialState.RUNNING and t.number < number:
                used += _reserved(t)
        if used + estimate <= self.minutes + 1e-9:  # type: ignore[operator]
            return Claim(claims, job, trial_id, number)
        claims.heartbeat.release(trial_id)
        claims.storage.set_trial_state_values(trial_id, TrialState.PRUNED)
        return None

    def _take_restart(self) -> Claim | None:
        self.claims.refresh()
        taken = {claim_job(t) for t in self._tokens() if t.state in _LIVE}
        for i in range(self.limit or 0):
            job = f"{START_JOB}{i}"
            if job in taken:
                continue
            claim = self.claims.try_claim(job)
            if claim is not None:
                return claim
        return None


def _reserved(trial: FrozenTrial) -> float:
    """The minutes a reservation claim reserved (in its job's name)."""
    try:
        return max(0.0, float((claim_job(trial) or "")[len(MINUTES_JOB):]))
    except ValueError:
        return 0.0


def _spent(trial: FrozenTrial) -> float:
    """The minutes a completed reservation's start took (its value)."""
    return max(0.0, float(trial.value or 0.0)) if trial.values else 0.0
