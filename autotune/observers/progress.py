"""Progress on the terminal: a bar over trials and a live line per restart (on stderr)."""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm

from autotune.stats.coldstart import warmup_converged
from autotune.study.events import StudyObserver
from autotune.core.records import EngineConfig, RestartResult, config_differences
from autotune.core.escape import escape_text, raw_stream
from autotune.core.redact import redact_text

__all__ = ["ProgressPrinter", "RecheckProgress"]


def _restart_line(label: str, result: RestartResult, config: EngineConfig | None, unit: str = "tok/s",
                  cold_counts: bool = False) -> str:
    head = f"  {label} r{result.restart} seed={result.seed}"
    if not result.ok:
        return f"{head} {result.status.upper()}: {result.error}"
    text = f"{head} {result.value:8.1f} tok/s" if unit == "tok/s" else f"{head} {result.value:8.3f} {unit}"
    if result.levels:
        text += " (" + ", ".join(f"c{lv.concurrency} {lv.tok_s:.1f} tok/s" for lv in result.levels) + ")"
    if result.accept_len is not None:
        text += f"  accept={result.accept_len:.2f}"
    if result.startup_s is not None:
        text += f"  startup={result.startup_s:.0f}s"
    if result.cold:
        text += ("  (cold first start: counted, its warm-up converged and the study's cold starts match warm ones)"
                 if cold_counts else "  (cold first start: recorded, not counted)")
    if config is not None:
        for d in config_differences(config, result.resolved):
            text += f"\n    WARNING resolved != configured: {d}"
    return text


class ProgressPrinter(StudyObserver):
    """Shows the study's progress; ``quiet`` keeps only the bar."""

    def __init__(self, stream: IO[str] | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.bar: tqdm[Any] | None = None
        self.config: EngineConfig | None = None

    def _write(self, text: str) -> None:
        if self.quiet:
            return
        # Engine errors can quote a token or a URI with a password, and labels and engine lines are other people's
        # text: escaped (issue 44) whichever stream this prints to.
        text = escape_text(redact_text(text))
        if self.bar is not None:
            # The bar's own stream (escaped above already): tqdm clears and redraws the bar around a line written to
            # the stream the bar is on.
            self.bar.write(text, file=raw_stream(self.stream))
        else:
            print(text, file=self.stream)

    def on_study_start(self, ctx: Any) -> None:
        done = ctx.ledger.finished_search_trials()
        verb = "Resuming" if ctx.resumed else "Starting"
        self._write(f"{verb} study {ctx.options.study_name} ({ctx.space.name}, engine {ctx.engine.name}); "
                    f"{done} of {ctx.options.trials} trials already done")
        self.bar = tqdm(total=ctx.options.trials, initial=min(done, ctx.options.trials), desc="trials",
                        unit="trial", file=raw_stream(self.stream), leave=False, dynamic_ncols=True)

    def on_trial_start(self, ctx: Any, number: int, config: EngineConfig) -> None:
        self.config = config
        self._write(f"trial {number}: {config.label()}")

    def on_restart(self, ctx: Any, phase: str, label: str, result: RestartResult) -> None:
        config = self.config if phase == "search" else None
        unit = getattr(getattr(getattr(ctx, "space", None), "workload", None), "unit", "tok/s")
        # The search counts a converged cold start once the study's own pairs found cold starts no different from
        # warm ones (study._trial.TrialMeasurement); verification never counts one.
        ledger = getattr(ctx, "ledger", None)
        cold_counts = (phase == "search" and result.cold and ledger is not None and ledger.cold_verdict().counts
                       and warmup_converged(result))
        line = _restart_line(label if phase == "verify" else "", result, config, unit, cold_counts)
        self._write(line.replace("   r", "  r", 1))

    def on_trial_end(self, ctx: Any, record: Any) -> None:
        summary = record.summary
        state = {"COMPLETE": "done", "PRUNED": "raced out", "FAIL": "FAILED"}.get(record.state, record.state)
        text = f"trial {record.number} {state}: {summary.describe() if summary else ''}"
        if record.state == "COMPLETE" and summary is not None and not summary.values and record.value is not None:
            # Screened: its cold start alone showed it cannot be the best, so no warm rerun was paid for. Optuna was
            # told the predicted warm throughput; "no successful restarts" would read as a failure.
            text = (f"trial {record.number} screened on its cold start: warm throughput predicted at "
                    f"{record.value:.1f} {summary.unit}, its bound below the incumbent's mean (no warm rerun)")
        if record.reason:
            text += f" - {record.reason}"
        self._write(text)
        if self.bar is not None:
            self.bar.update(1)

    def on_search_end(self, ctx: Any, end: Any, trials_started: int) -> None:
        if end is None:
            return
        ledger, options = ctx.ledger, ctx.options
        if trials_started == 0 and ctx.resumed and options.verify and not ledger.has_verification():
            self._write(f"The search was already over ({end.describe()}): going straight to verification")
        else:
            self._write(f"Search over: {end.describe()}")

    def on_verification_end(self, ctx: Any, verification: Any) -> None:
        self._write(f"verification done: {verification.restarts_used} engine starts")

    def on_study_end(self, ctx: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class RecheckProgress:
    """``autotune recheck``'s progress on stderr: a bar over the counted restarts planned and a line per restart as
    it lands (each stored as it lands, so an interrupted recheck's run again continues from them)."""

    def __init__(self, stream: IO[str] | None = None, unit: str = "tok/s") -> None:
        self.stream = stream or sys.stderr
        self.unit = unit
        self.bar: tqdm[Any] | None = None

    def start(self, planned: int, stored: int) -> None:
        if stored:
            self._write(f"recheck: continuing from the {stored} counted restart(s) an interrupted run of it stored")
        self.bar = tqdm(total=max(planned, stored), initial=stored, desc="recheck", unit="restart",
                        file=raw_stream(self.stream), leave=False, dynamic_ncols=True)

    def on_restart(self, candidate: Any, result: RestartResult) -> None:
        self._write(_restart_line(f"{candidate.role} {candidate.config.label()}", result, None, self.unit))
        if self.bar is not None and result.ok and not result.cold:
            self.bar.update(1)

    def _write(self, text: str) -> None:
        text = escape_text(redact_text(text))
        if self.bar is not None:
            self.bar.write(text, file=raw_stream(self.stream))
        else:
            print(text, file=self.stream)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
