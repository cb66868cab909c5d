"""One study's runs: the parent run, a child run per trial and per verification round, and the study's end."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core.facts import numeric_facts
from autotune.core.facts import OUTPUT_AGREEMENT
from autotune.core.records import EngineConfig, EngineFacts, OBJECTIVE_UNITS, RestartResult
from autotune.core.redact import redact, redact_command, redact_text
from autotune.observers.mlflow._conventions import (KIND_TRIAL, KIND_VERIFY, TAG_CONFIG_KEY, TAG_KIND, TAG_LOGGED,
    TAG_STUDY, TAG_TRIAL, _RUN_STATUS, _finite, _latency_metrics, _ms, _one_line, _summary_metrics, _unit_name,
    config_params, engine_tags, experiment_name)
from autotune.decisions.outputs import DIFFERS, OutputCheck
from autotune.observers.mlflow._session import _Child, _Session, _study_params
from autotune.report import report_json
from autotune.report.outputs import trial_output_check
from autotune.store.ledger import Ledger, StudyMeta, TrialRecord

if TYPE_CHECKING:
    from autotune.report import Report
    from autotune.decisions.verification import Verification


# -- what each run holds ---------------------------------------------------------------------------------


def _trial_name(number: int, config: EngineConfig) -> str:
    return f"trial {number:03d} {config.label()}"


def _trial_tags(study_name: str, number: int, config: EngineConfig, engine_info: EngineFacts) -> dict[str, str]:
    return {TAG_KIND: KIND_TRIAL, TAG_STUDY: study_name, TAG_TRIAL: str(number), TAG_CONFIG_KEY: config.key(),
            "label": config.label(), **engine_tags(engine_info)}


def _counted(restarts: Sequence[RestartResult]) -> list[RestartResult]:
    """Restarts that count (ok and warm), in order: their index is the metric step, as in the summary."""
    return [r for r in restarts if r.ok and not r.cold]


def _restart_metric(unit: str) -> str:
    """The per-restart metric's name: ``restart_tok_s`` (throughput) or ``restart_goodput_req_s``."""
    return f"restart_{_unit_name(unit)}"


def _restart_metrics(restarts: Sequence[RestartResult], skip: int = 0,
                     unit: str = "tok/s") -> list[tuple[str, float, int]]:
    out = []
    for i, r in enumerate(_counted(restarts)):
        if i >= skip:
            out.append((_restart_metric(unit), r.measured(), i))
            for level in r.levels:
                # Per load level as well, whatever the objective: what each level measured, restart by restart.
                if level.tok_s is not None:
                    out.append((f"c{level.concurrency}.restart_tok_s", float(level.tok_s), i))
                if level.latency.get("goodput") is not None:
                    out.append((f"c{level.concurrency}.restart_goodput_req_s", float(level.latency["goodput"]), i))
    return out


def _fact_metrics(restarts: Sequence[RestartResult]) -> list[tuple[str, float, int]]:
    """Every restart's numeric facts (:mod:`autotune.core.facts`) as ``fact.<key>`` metrics, the step the restart's
    place among all the run's restarts (failed and cold ones too: a guard trip's figures matter most)."""
    return [(f"fact.{key}", value, i) for i, r in enumerate(restarts) for key, value in numeric_facts(r.facts).items()]
def _output_metrics(check: OutputCheck | None) -> dict[str, float]:
    """The trial's agreement with the baseline's outputs (:mod:`autotune.decisions.outputs`), when compared."""
    return {} if check is None or check.agreement is None else {OUTPUT_AGREEMENT: float(check.agreement)}


def _output_tags(check: OutputCheck | None) -> dict[str, str]:
    return {"output_check": DIFFERS} if check is not None and check.differs else {}


def _result_tags(summary: Any, state: str, reason: str | None) -> dict[str, str]:
    tags = {"trial_state": state}
    if reason:
        tags["failure_reason"] = reason
    if summary is not None:
        tags["resolved.cudagraph_mode"] = str(summary.resolved_mode or "unknown")
        tags["resolved.cudagraph_capture_sizes"] = (
            "unknown" if summary.resolved_sizes is None else json.dumps(list(summary.resolved_sizes)))
        tags["resolved_differs"] = str(summary.resolved_differs).lower()
        if summary.differences:
            tags["resolved.differences"] = "; ".join(summary.differences)
        tags["unstable"] = str(summary.unstable).lower()
    return tags


# -- the shared logging of trials, verification and the study's end --------------------------------------


class _StudyLog:
    """Everything one study logs, against one parent run; every method is safe to call twice."""

    def __init__(self, session: _Session, ledger: Ledger, meta: StudyMeta, claims: Any = None,
                 wait: Callable[[], None] | None = None) -> None:
        self.session = session
        self.ledger = ledger
        self.study = ledger.study
        self.meta = meta
        self.engine_info = meta.engine
        #: The unit of every restart's value: the study's objective's.
        self.unit = OBJECTIVE_UNITS.get(meta.objective, "tok/s")
        self.experiment_id = session.experiment_id(experiment_name(meta.model, self.engine_info))
        self.parent_id, self.created = session.open_parent(ledger, self.experiment_id, meta, claims, wait)
        self._children = session.children(self.experiment_id, self.parent_id)

    def refresh(self) -> None:
        """Re-read the parent's child runs: other workers add theirs while this one runs."""
        self._children = self.session.children(self.experiment_id, self.parent_id)

    def provenance(self, space_path: str | None, command: Sequence[str]) -> None:
        """The study's params, the space file and the exact command: whichever the parent run lacks.

        Each is logged once per parent run, by the run that created it or, when that run stopped first (a full
        disk: issue 22, FS03), by the next one: a resume logs its own command only if none was logged.
        """
        s = self.session
        have = {a.path for a in s.client.list_artifacts(self.parent_id)}
        if not self.created:
            s.log_new(self.parent_id, params=_study_params(self.meta))
        if space_path and os.path.isfile(space_path):
            if os.path.basename(space_path) not in have:
                s.log_file(self.parent_id, space_path)
        elif (space_text := self.ledger.space_yaml()) and "space.yaml" not in have:
            s.log_text(self.parent_id, space_text, "space.yaml")
        if command and "command.txt" not in have:
            s.log_text(self.parent_id, shlex.join(redact_command(command)) + "\n", "command.txt")

    # trials ----------------------------------------------------------------------------------------------

    def start_trial(self, number: int, config: EngineConfig) -> str:
        """Open the trial's run before its restarts, so the UI shows it (and its restarts) as they land."""
        key = (KIND_TRIAL, str(number))
        # This worker's list of child runs is as old as its last refresh; a peer may have opened this trial's run
        # since (e.g. logging it while this worker's heartbeat was late): one narrow search first (issue 22).
        existing = self._children.get(key) or self.session.find_child(self.experiment_id, self.parent_id, key)
        if existing is not None:
            self._children[key] = existing
            return existing.run_id
        run_id = self.session.child_run(self.experiment_id, self.parent_id, _trial_name(number, config),
                                        _trial_tags(self.study.study_name, number, config, self.engine_info))
        # Known before anything else is logged to it: if logging the params fails, the trial's end completes
        # this run instead of opening a second one.
        self._children[key] = _Child(run_id)
        self.session.log(run_id, params=config_params(config))
        return run_id

    def log_restart(self, run_id: str, step: int, result: RestartResult) -> None:
        if result.ok and not result.cold:
            metrics = [(name, value, step) for name, value, _ in _restart_metrics([result], unit=self.unit)]
            self.session.log(run_id, metrics=metrics)

    def log_trial(self, record: TrialRecord, start_ms: int | None = None, end_ms: int | None = None) -> None:
        """Complete the trial's run (creating it if needed) unless it is complete already."""
        outputs = trial_output_check(self.ledger, record)
        self._complete(
            (KIND_TRIAL, str(record.number)), _trial_name(record.number, record.config),
            _trial_tags(self.study.study_name, record.number, record.config, self.engine_info),
            config_params(record.config), record.restarts,
            {**_summary_metrics(record.summary), **_latency_metrics(record.restarts), **_output_metrics(outputs)},
            {**_result_tags(record.summary, record.state, record.reason), **_output_tags(outputs)},
            _RUN_STATUS.get(record.state, "FAILED"), start_ms, end_ms)

    def _complete(self, key: tuple[str, str], name: str, identity: Mapping[str, str], params: Mapping[str, str],
                  restarts: Sequence[RestartResult], metrics: Mapping[str, float], tags: Mapping[str, str],
                  status: str, start_ms: int | None = None, end_ms: int | None = None) -> None:
        """Log a child run in full, or finish one that an interruption left open, exactly once.

        The completion tag goes in the last batch, after the failure logs: a run without it is redone on the
        next sync, and the restarts it already holds (logged live) are not logged again.
        """
        existing = self._children.get(key)
        if existing is None:
            # Another process (a worker's live logging, another worker's sync) may have opened it since this
            # one last looked: one narrow search before creating it.
            existing = self.session.find_child(self.experiment_id, self.parent_id, key)
        if existing is not None and existing.logged:
            return
        if existing is None:
            run_id = self.session.child_run(self.experiment_id, self.parent_id, name, identity, start_ms=start_ms)
            self.session.log(run_id, params=params)
            skip = 0
        else:
            run_id = existing.run_id
            # Again, in case the opening half failed: MLflow accepts a param logged again with the same value.
            self.session.log(run_id, params=params)
            skip = self.session.logged_steps(run_id, _restart_metric(self.unit))
        self.session.restart_logs(run_id, restarts)
        # The facts go in the completing batch, once: a run completed earlier returned above.
        values = (_restart_metrics(restarts, skip, self.unit) + [(k, v, 0) for k, v in metrics.items()]
                  + _fact_metrics(restarts))
        self.session.log(run_id, metrics=values, tags={**identity, **tags, TAG_LOGGED: "true"})
        self.session.finish(run_id, status, end_ms)
        self._children[key] = _Child(run_id, logged=True)

    def sync_trials(self) -> None:
        """Log every finished trial that has no complete run yet (resumes, tracking outages, log_study)."""
        from optuna.trial import TrialState

        self.refresh()
        done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        retried = self.ledger.retried()
        for trial in self.study.get_trials(deepcopy=False, states=done):
            record = self.ledger.trial_record(trial, retried)
            if record is None or record.duplicate_of is not None:
                continue  # infeasible (never started) or a repeat of another trial: nothing was measured
            self.log_trial(record, _ms(trial.datetime_start), _ms(trial.datetime_complete))

    # verification ----------------------------------------------------------------------------------------

    def log_verification(self, verification: Verification) -> None:
        """One nested run per verified configuration, tagged by its config key."""
        winner_key = verification.winner.candidate.config.key()
        for entry in verification.entries:
            cfg, role = entry.candidate.config, entry.candidate.role
            is_winner = cfg.key() == winner_key
            identity = {TAG_KIND: KIND_VERIFY, TAG_STUDY: self.study.study_name, TAG_CONFIG_KEY: cfg.key(),
                        "label": cfg.label(), "role": role, "winner": str(is_winner).lower(),
                        **engine_tags(self.engine_info)}
            if entry.candidate.trial_number is not None:
                identity["search_trial_number"] = str(entry.candidate.trial_number)
            metrics = {**_summary_metrics(entry.summary), **_latency_metrics(entry.restarts)}
            tags: dict[str, str] = {}
            if entry.slo_checks:
                tags["slo_met"] = str(entry.meets_slo).lower()
            if entry.dropped:
                tags["dropped_after_round"] = "1"  # the runner-up cut (autotune.decisions.verification.first_round_cut)
            if entry.comparison is not None:
                c = entry.comparison
                tags["verdict"] = c.verdict
                metrics.update({k: v for k, raw in (("speedup", c.speedup), ("speedup_ci_low", c.ci_low),
                                                    ("speedup_ci_high", c.ci_high), ("p_value", c.p_value))
                                if (v := _finite(raw)) is not None})
            self._complete((KIND_VERIFY, cfg.key()), f"verify {'winner' if is_winner else role}: {cfg.label()}",
                           identity, config_params(cfg), entry.restarts, metrics, tags,
                           "FINISHED" if entry.summary.status == "ok" else "FAILED")

    def sync_verification(self) -> None:
        verification = self.ledger.verification()
        if verification is not None:
            self.log_verification(verification)

    # the study's end -------------------------------------------------------------------------------------

    def finish_study(self, report: Report, note: Callable[[str], None]) -> None:
        """Winner, intervals, verdict, report and plots on the parent run; then close it."""
        s = self.session
        params, metrics, tags = _outcome(report)
        s.log_new(self.parent_id, params=params, metrics=metrics, tags=tags)
        s.log_text(self.parent_id, json.dumps(redact(report_json(report)), indent=2, default=str), "report.json")
        try:
            text = redact_text(report.render())
            s.log_text(self.parent_id, text + "\n", "report.txt")
            s.log(self.parent_id, tags={"mlflow.note.content": f"```\n{text}\n```"})
        except Exception as exc:  # noqa: BLE001 - the text table is a convenience; the JSON is logged already
            note(f"report text not logged: {_one_line(exc)}")
        self.plots(report, note)
        s.finish(self.parent_id, "FINISHED")

    def plots(self, report: Report, note: Callable[[str], None]) -> None:
        from autotune.report.plots import save_study_plots

        with tempfile.TemporaryDirectory(prefix="autotune-plots-") as tmp:
            written, skipped = save_study_plots(self.ledger, report, tmp)
            for path in written:
                self.session.client.log_artifact(self.parent_id, str(path), artifact_path="plots")
        if skipped:
            self.session.log(self.parent_id, tags={f"plot_skipped.{k}": v for k, v in skipped.items()})
            for name, why in skipped.items():
                note(f"plot {name} skipped: {why}")


def _outcome(report: Report) -> tuple[dict[str, str], dict[str, float], dict[str, str]]:
    """Params, metrics and tags for the parent run from the report: winner, intervals, speedup, verdict."""
    params: dict[str, str] = {}
    metrics: dict[str, float] = {f"trials_{k}": float(v) for k, v in dataclasses.asdict(report.trials).items()}
    tags: dict[str, str] = {}
    metrics["restarts_used"] = float(report.budget.restarts_used)
    metrics["engine_minutes"] = float(report.budget.minutes_used)
    if report.search_best is not None:
        metrics[f"search_best_{_unit_name(report.unit)}"] = float(report.search_best.mean)
    tags["warnings"] = str(len(report.warnings))
    for best in report.levels:
        metrics[f"c{best.concurrency}.best_{_unit_name(best.unit)}"] = float(best.value)
        tags[f"c{best.concurrency}.best"] = best.label
    winner, baseline = report.winner, report.baseline
    if winner is not None:
        params.update(config_params(winner.config, prefix="winner."))
        tags.update({"winner": winner.label, "verdict": str(report.verdict),
                     "winner_is_baseline": str(report.winner_is_baseline).lower()})
        if winner.differences:
            # The winner did not run as configured (or speculation changed its default plan): say so on the run.
            tags["winner.resolved_differences"] = "; ".join(winner.differences)
        for name, entry in (("winner", winner), ("baseline", baseline)):
            if entry is None:
                continue
            for field, metric in (("mean", f"mean_{_unit_name(entry.unit)}"), ("ci_low", "ci_low"),
                                  ("ci_high", "ci_high")):
                value = _finite(getattr(entry, field))
                if value is not None:
                    metrics[f"{name}_{metric}"] = value
        if winner.speedup is not None:
            sp = winner.speedup
            for metric, raw in (("speedup", sp.speedup), ("speedup_ci_low", sp.ci_low),
                                ("speedup_ci_high", sp.ci_high), ("speedup_confidence", sp.confidence)):
                value = _finite(raw)
                if value is not None:
                    metrics[metric] = value
    if report.no_result:
        tags["no_result"] = report.no_result
    _schedule_outcome(report, metrics, tags)
    return params, metrics, tags


def _schedule_outcome(report: Report, metrics: dict[str, float], tags: dict[str, str]) -> None:
    """The K schedule as one configuration on the parent run: what was derived (or why not), its verdict against
    the best fixed K at the aggregate, and both at each level (``c8.k_schedule_tok_s``, ``c8.best_fixed_k_tok_s``)."""
    note = report.schedule
    if note is None:
        return
    if note.reason:
        tags["k_schedule.derivation"] = note.reason
    verdict = note.verdict
    if verdict is None:
        return
    c = verdict.comparison
    tags.update({"k_schedule": verdict.schedule_label, "k_schedule.best_fixed_k": verdict.fixed_label,
                 "k_schedule.verdict": c.verdict, "k_schedule.won": str(verdict.won).lower()})
    for metric, raw in (("k_schedule.vs_fixed", c.speedup), ("k_schedule.vs_fixed_ci_low", c.ci_low),
                        ("k_schedule.vs_fixed_ci_high", c.ci_high)):
        value = _finite(raw)
        if value is not None:
            metrics[metric] = value
    unit = _unit_name(report.unit)
    for level, sched, fixed in verdict.levels:
        if sched is not None:
            metrics[f"c{level}.k_schedule_{unit}"] = float(sched)
        if fixed is not None:
            metrics[f"c{level}.best_fixed_k_{unit}"] = float(fixed)
