"""Study observers: progress display and tracking hook into the study through one small base class."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.records import EngineConfig, RestartResult

if TYPE_CHECKING:
    from autotune.study import StudyContext, TrialRecord
    from autotune.verify import Verification

__all__ = ["StudyObserver", "notify"]


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

    def on_verification_end(self, ctx: StudyContext, verification: Verification) -> None:
        """The verification phase finished."""

    def on_study_end(self, ctx: StudyContext, report: Mapping[str, Any]) -> None:
        """The study finished; ``report`` is :func:`autotune.report.build_report`'s dict."""

    def close(self) -> None:
        """Release resources (progress bars, open runs)."""


def notify(observers: Sequence[StudyObserver], event: str, *args: Any) -> None:
    """Call ``event`` on every observer."""
    for obs in observers:
        getattr(obs, event)(*args)
