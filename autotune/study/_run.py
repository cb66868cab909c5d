"""A whole study, start to end: open it, search, verify (or close it without), and turn Ctrl-C into a resumable
stop."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence

from autotune.config.space import SearchSpace
from autotune.engines import EngineBackend
from autotune.engines.process import stop_live
from autotune.store import ledger as _ledger
from autotune.store.ledger import Ledger
from autotune.store.search_end import INTERRUPTED
from autotune.study._open import DEFAULT_POLL_S, _open
from autotune.study._optimize import _interruption, _search
from autotune.study._redo import redo_lost
from autotune.study._stopping import search_end
from autotune.study._verification import _verify, extension_due
from autotune.study.events import StudyContext, StudyObserver, notify
from autotune.study.options import StudyOptions

__all__ = ["Interrupted", "run_study"]


class Interrupted(Exception):
    """Ctrl-C or SIGTERM; everything finished so far is saved and the same command resumes.

    Attributes:
        signum: The signal that interrupted the study (``SIGINT`` for Ctrl-C).
    """

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)



def run_study(space: SearchSpace, engine: EngineBackend, options: StudyOptions,
              observers: Sequence[StudyObserver] = (), *, worker: int | None = None, gpus: str | None = None,
              sleep: Callable[[float], None] = time.sleep, poll_s: float = DEFAULT_POLL_S) -> Ledger:
    """Run (or resume, or join) a whole study: baselines, search, verification. Returns the study's ledger.

    Any number of processes may run this on the same study at once (each a worker); the study ends for each
    when it is verified.

    Args:
        worker: This worker's index among the workers (``None``: a lone process), for the sampler's seed and
            the record of who ran what.
        gpus: The GPUs this worker's engines see (``CUDA_VISIBLE_DEVICES``), recorded with its trials.
        sleep: How waiting for other workers passes (the scaling benchmark's simulated clock).
        poll_s: Seconds between looks at the study while waiting for other workers.

    Raises:
        Interrupted: Ctrl-C or SIGTERM; everything finished so far is stored and the same command resumes.
        autotune.store.ledger.LedgerError: the stored study has a schema this autotune does not read.
    """
    ctx = _open(space, engine, options, worker, gpus, sleep, poll_s)
    ledger = ctx.ledger
    # A study concluded in an earlier session: this process repairs what tracking may have missed, as the one
    # that concluded it would (everything an observer logs is logged once, whoever asks).
    ctx.concluded = ledger.has_verification()
    try:
        notify(observers, lambda o: o.on_study_start(ctx))
        searching = True
        try:
            _search(ctx, observers)
            searching = False
            if options.verify and (not ledger.has_verification() or extension_due(ctx)):
                _verify(ctx, observers)
            elif options.verify:
                redo_lost(ctx, observers)  # restarts a guard trip cost a concluded verification (issue 32)
            elif not ledger.has_verification():
                # No verification: the study is over once the search is; one worker closes it.
                claim = ctx.claims.try_claim(_ledger.FINISH_JOB.format(ledger.finished_search_trials()))
                if claim is not None:
                    ctx.concluded = True
                    claim.complete()
        except KeyboardInterrupt as exc:
            stop_live()  # an engine the interruption caught between its start and its cleanup
            if searching:
                _record_interrupted_search(ctx, _interruption(exc))
            raise Interrupted(f"{_interruption(exc)}; finished work is saved in {_ledger.redact(str(options.storage))}"
                              " - run the same command again to resume", getattr(exc, "signum", signal.SIGINT)) from None
        notify(observers, lambda o: o.on_study_end(ctx))
    finally:
        ctx.claims.heartbeat.close()
    return ledger



def _record_interrupted_search(ctx: StudyContext, why: str) -> None:
    """Store that the search was interrupted (the same command resumes it and stores its next end). Best effort:
    a storage that fails now must not hide the interruption."""
    try:
        if not ctx.ledger.search_closed():  # a closed search keeps the reason it closed with
            ctx.ledger.record_search_end(search_end(ctx, INTERRUPTED, why))
    except Exception:  # noqa: BLE001 - the interruption is what the user must see
        pass
