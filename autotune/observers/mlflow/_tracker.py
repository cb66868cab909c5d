"""The study observer that logs to MLflow while a study runs, and :func:`log_study` that replays one after the fact."""

from __future__ import annotations

import functools
import logging
import os
import shlex
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Concatenate, ParamSpec

from autotune.core.records import EngineConfig, RestartResult
from autotune.core.redact import redact
from autotune.core.urls import redact_url
from autotune.observers.mlflow._conventions import (MAX_FAILURES_IN_A_ROW, TrackingError, _one_line,
    resolve_tracking_uri)
from autotune.observers.mlflow._session import _Session
from autotune.observers.mlflow._study_log import _StudyLog
from autotune.store.ledger import Ledger, StudyMeta, TrialRecord
from autotune.study.events import StudyObserver

if TYPE_CHECKING:
    from autotune.study.events import StudyContext
    from autotune.report import Report
    from autotune.decisions.verification import Verification

_log = logging.getLogger("autotune.observers.mlflow")


# -- the observer ----------------------------------------------------------------------------------------


_P = ParamSpec("_P")


def _guarded(method: Callable[Concatenate[MlflowTracker, _P], None]) -> Callable[Concatenate[MlflowTracker, _P], None]:
    """Observer methods never raise for tracking problems: the study's measurements come first."""

    def wrapper(self: MlflowTracker, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        if self._off:
            return
        try:
            method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any tracking failure is logged and survived
            self._problem(method.__name__, exc)
            return
        self._failures_in_a_row = 0

    functools.update_wrapper(wrapper, method)  # functools.wraps, which the checker would type as another callable
    return wrapper


class MlflowTracker(StudyObserver):
    """Logs a study to MLflow as it runs: parent run, nested trial and verification runs, plots.

    The study's outcome (winner, intervals, verdict, the report's text and JSON, plots) is the report's, and the
    tracker does not build one: whoever runs the study builds it once, after :func:`autotune.study.run_study`
    returns, and hands it over with :meth:`on_report` (``autotune tune`` logs the copy it prints). Until then the
    parent run of a study this worker concluded stays open; closed without a report, it is marked KILLED and the
    next resume logs the outcome.

    Args:
        tracking_uri: MLflow tracking URI; default ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db``.
        stream: Where the one warning about tracking problems goes (stderr).

    Attributes:
        problems: One line per tracking operation that failed (the first is also printed).
        parent_run_id: The study's parent run, once the study started.
    """

    def __init__(self, tracking_uri: str | None = None, stream: IO[str] | None = None) -> None:
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.stream = stream or sys.stderr
        self.problems: list[str] = []
        self.parent_run_id: str | None = None
        self._off = False
        self._log: _StudyLog | None = None
        self._trial_runs: dict[int, tuple[str, int]] = {}  # trial number -> (run id, restarts logged live)
        self._current_trial: int | None = None
        self._ended = False
        self._outcome_due = False  # this worker concluded the study: the report it is handed is the outcome
        self._failures_in_a_row = 0
        self._lone = True  # a lone process, not one of several workers on the study

    # problems --------------------------------------------------------------------------------------------

    def _problem(self, where: str, exc: BaseException) -> None:
        line = f"{where}: {_one_line(exc)}"
        self.problems.append(line)
        self._failures_in_a_row += 1
        if self._log is None:
            # Without a parent run there is nothing to attach anything to: stop trying for this study.
            self._off = True
            why = str(exc) if isinstance(exc, TrackingError) else (
                f"{line}; fix the tracking URI ({redact_url(self.tracking_uri)}) or pass --no-mlflow")
            print(f"autotune: MLflow tracking is off for this study: {why}. The study carries on.", file=self.stream)
            return
        if len(self.problems) == 1:
            print(f"autotune: MLflow tracking problem ({line}); the study carries on. Further problems are not "
                  f"printed; after {MAX_FAILURES_IN_A_ROW} in a row tracking stops, and resuming the study logs "
                  "what is missing.", file=self.stream)
        if self._failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            # A store that is down makes every call wait out MLflow's HTTP retries: stop paying that per
            # trial. Nothing is lost: the next resume (or log_study) logs what is missing from Optuna's record.
            self._off = True

    def _attempt(self, where: str, step: Callable[..., Any], *args: Any) -> None:
        if self._off:
            return
        try:
            step(*args)
            self._failures_in_a_row = 0
        except Exception as exc:  # noqa: BLE001 - see _guarded
            self._problem(where, exc)

    def _note(self, text: str) -> None:
        _log.info("MLflow: %s", text)

    # events ----------------------------------------------------------------------------------------------

    @_guarded
    def on_study_start(self, ctx: StudyContext) -> None:
        session = _Session(self.tracking_uri)
        if session.rebuilt:
            print(f"autotune: {session.rebuilt}", file=self.stream)
        meta = ctx.ledger.meta() if ctx.ledger.has_meta() else _meta_from_context(ctx)
        self._lone = ctx.owner.get("worker") is None
        self._log = _StudyLog(session, ctx.ledger, meta, ctx.claims, lambda: ctx.sleep(ctx.poll_s))
        self.parent_run_id = self._log.parent_id
        command = [redact(arg) for arg in (list(ctx.options.command) or [os.path.basename(sys.executable), *sys.argv])]
        # What a run stopped by a full disk (or anything else) left out of the parent run is logged now (FS03).
        if self._log.created or self._lone:
            self._log.provenance(ctx.space.source, command)
        if not self._log.created and self._lone:
            self._log.session.log(self._log.parent_id, tags={"resumed_by": shlex.join(command)})
        if self._lone:
            # A lone process closes the run a Ctrl-C left open and logs anything missed while offline; with
            # several workers the one that concludes the study does it, once the others are done.
            self._log.sync_trials()

    @_guarded
    def on_trial_start(self, ctx: StudyContext, number: int, config: EngineConfig) -> None:
        self._current_trial = number
        if self._log is not None:
            self._trial_runs[number] = (self._log.start_trial(number, config), 0)

    @_guarded
    def on_restart(self, ctx: StudyContext, phase: str, label: str, result: RestartResult) -> None:
        if phase != "search" or self._log is None or self._current_trial not in self._trial_runs:
            return
        run_id, logged = self._trial_runs[self._current_trial]
        if result.ok and not result.cold:
            self._log.log_restart(run_id, logged, result)
            self._trial_runs[self._current_trial] = (run_id, logged + 1)

    @_guarded
    def on_trial_end(self, ctx: StudyContext, record: TrialRecord) -> None:
        if self._log is None:
            return
        if record.duplicate_of is None:
            self._log.log_trial(record)
        self._trial_runs.pop(record.number, None)
        self._current_trial = None

    @_guarded
    def on_verification_end(self, ctx: StudyContext, verification: Verification) -> None:
        if self._log is not None:
            self._log.log_verification(verification)

    @_guarded
    def on_study_end(self, ctx: StudyContext) -> None:
        if self._log is None:
            return
        if not ctx.concluded:
            self._ended = True  # another worker concluded the study and logs its outcome
            return
        # Separate steps: trials missing from MLflow must not cost the verification runs or the outcome.
        self._attempt("on_study_end/sync_trials", self._log.sync_trials)
        # A resumed study whose verification finished in an earlier session has no on_verification_end.
        self._attempt("on_study_end/sync_verification", self._log.sync_verification)
        self._outcome_due = True

    def on_report(self, report: Report) -> None:
        """Log the study's outcome from ``report`` (built once by the caller of the study) and close the parent
        run; nothing when this worker did not conclude the study (the one that did logs it)."""
        if self._log is None or self._off or not self._outcome_due:
            return
        self._attempt("on_report/finish_study", self._log.finish_study, report, self._note)
        self._outcome_due = False
        self._ended = True
        if len(self.problems) > 1:
            print(f"autotune: {len(self.problems)} MLflow tracking operations failed; first: {self.problems[0]}",
                  file=self.stream)

    def close(self) -> None:
        """Mark runs left open by an interruption as KILLED; a resume finishes them."""
        if self._log is None or self._ended or self._off:
            return
        try:
            for run_id, _ in self._trial_runs.values():
                self._log.session.finish(run_id, "KILLED")
            if self._lone:  # with several workers the study goes on without this one
                self._log.session.finish(self._log.parent_id, "KILLED")
        except Exception as exc:  # noqa: BLE001 - closing is best effort; the resume repairs the runs
            self._problem("close", exc)
        self._trial_runs.clear()
        self._ended = True


def _meta_from_context(ctx: StudyContext) -> StudyMeta:
    """Study metadata when the study did not record its own."""
    return StudyMeta(space_name=ctx.space.name, model=ctx.space.engine_args.get("model"), engine=ctx.engine_info,
                     baseline=ctx.space.baseline())


# -- after the fact --------------------------------------------------------------------------------------


def log_study(ledger: Ledger, space_path: str | None = None, tracking_uri: str | None = None) -> str:
    """Log a finished (or partial) study that ran without tracking, e.g. on a GPU box with ``--no-mlflow``.

    Safe to repeat: what is logged already is not logged again, and the same parent run is continued.

    Args:
        ledger: The study (e.g. loaded from an ``optuna.db`` copied back from the GPU box).
        space_path: The search space file to attach; default the copy the study stored.
        tracking_uri: MLflow tracking URI (default as for :class:`MlflowTracker`).

    Returns:
        The parent run's id.

    Raises:
        TrackingError: MLflow is missing or the store cannot be used; the message names the fix.
    """
    from autotune.report import build_report

    try:
        session = _Session(tracking_uri)
        meta = ledger.meta()
        log = _StudyLog(session, ledger, meta)
        log.provenance(space_path, list(meta.command))  # whatever the parent run lacks (FS03)
        log.sync_trials()
        log.sync_verification()
        log.finish_study(build_report(ledger), lambda text: _log.info("MLflow: %s", text))
    except TrackingError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the store, not an MLflow traceback
        raise TrackingError(f"could not log study {ledger.name!r} to "
                            f"{redact_url(resolve_tracking_uri(tracking_uri))}: "
                            f"{_one_line(exc)}; check the tracking URI (--tracking-uri)") from exc
    return log.parent_id
