"""What observers see of a study: the context, and one small base class for the events.

Progress display and tracking hook into the study here. The study calls observers; it never builds a report
for them: an observer that wants one builds it from :attr:`StudyContext.ledger`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import optuna

from autotune.store.claims import Claims, StartTokens
from autotune.store.ledger import Ledger, TrialRecord
from autotune.core.records import EngineConfig, EngineFacts, RestartResult

if TYPE_CHECKING:
    from autotune.engines import EngineBackend
    from autotune.study.options import StudyOptions
    from autotune.config.space import SearchSpace
    from autotune.decisions.verification import Verification
    from autotune.store.search_end import SearchEnd

__all__ = ["StudyContext", "StudyObserver", "notify"]


@dataclasses.dataclass
class StudyContext:
    """What observers see: the study's ledger, its space, engine and options.

    Attributes:
        claims: Jobs that must run once however many workers share the study (:class:`autotune.store.claims.Claims`).
        concluded: This worker concluded the study (verified, or finished it without verification): the one that
            logs the outcome; every other worker only logs its own trials.
        owner: This worker: host, pid, worker index, GPUs.
        poll_s: Seconds between looks at the study while waiting for other workers.
        sleep: How waiting passes (``time.sleep``; the scaling benchmark's simulated clock).
        start_tokens: Under ``--budget-restarts``, the tokens every engine start takes first
            (:class:`autotune.store.claims.StartTokens`): the start budget's atomic ceiling across workers.
    """

    options: StudyOptions
    space: SearchSpace
    engine: EngineBackend
    engine_info: EngineFacts
    ledger: Ledger
    resumed: bool = False
    claims: Claims = dataclasses.field(kw_only=True)
    concluded: bool = False
    owner: Mapping[str, object] = dataclasses.field(default_factory=dict)
    poll_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    start_tokens: StartTokens | None = None

    @property
    def study(self) -> optuna.Study:
        """The Optuna study."""
        return self.ledger.study


class StudyObserver:
    """Receives study events. Every method is optional; the default does nothing.

    Observers must not raise for a problem of their own (a tracking server down, say): they log it and carry
    on, because losing a measurement is worse than losing a plot.
    """

    def on_study_start(self, ctx: StudyContext) -> None:
        """The study is open (new or resumed); ``ctx`` has the space, engine facts, options and command."""

    def on_trial_start(self, ctx: StudyContext, number: int, config: EngineConfig) -> None:
        """Trial ``number`` is about to start its restarts."""

    def on_restart(self, ctx: StudyContext, phase: str, label: str, result: RestartResult) -> None:
        """A restart finished; ``phase`` is ``search`` or ``verify``."""

    def on_trial_end(self, ctx: StudyContext, record: TrialRecord) -> None:
        """A trial finished (complete, pruned or failed)."""

    def on_search_end(self, ctx: StudyContext, end: SearchEnd | None, trials_started: int) -> None:
        """This worker's search is over: ``end`` says why (``None``: not decided yet, another worker's trial is
        running); ``trials_started`` counts this process's trials (0: a resume that goes straight to
        verification)."""

    def on_verification_end(self, ctx: StudyContext, verification: Verification) -> None:
        """The verification phase finished."""

    def on_study_end(self, ctx: StudyContext) -> None:
        """Search and verification are done; everything is in ``ctx.ledger``."""

    def close(self) -> None:
        """Release resources (progress bars, open runs)."""


def notify(observers: Sequence[StudyObserver], event: Callable[[StudyObserver], None]) -> None:
    """Hand one event to every observer, in order: ``notify(observers, lambda o: o.on_trial_end(ctx, record))``.

    The event is a call, not a method's name, so the type checker reads every event's arguments against
    :class:`StudyObserver`'s signature (a misspelt event or a missing argument is a type error, not an
    ``AttributeError`` in the middle of a study)."""
    for obs in observers:
        event(obs)
