"""MLflow tracking: an experiment per model and GPU, a parent run per study, a nested run per trial.

The tracker talks to MLflow through ``MlflowClient`` (never the fluent API's global "active run") and is
idempotent: every run carries tags saying what it stands for (``autotune.trial_number``,
``autotune.config_key``), and a run is complete once it carries ``autotune.logged``. So a study resumed after
Ctrl-C continues the same parent run (its id is kept in the study's ledger), finishes the trial
run that the interruption left open, and logs nothing twice; :func:`log_study` replays a study that ran
elsewhere (``--no-mlflow`` on a GPU box) through the same code.

The default store is ``sqlite:///mlruns/mlflow.db`` with artifacts under ``mlruns/``: MLflow 3 refuses a plain
file store by default. Any tracking URI works (``--tracking-uri``, ``MLFLOW_TRACKING_URI``), so a team's
MLflow server needs nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from autotune.study.events import StudyObserver
from autotune.store.ledger import MLFLOW_PARENT_JOB, Ledger, StudyMeta, TrialRecord
from autotune.stats.latency import summarize_latency
from autotune.core.records import OBJECTIVE_UNITS, EngineConfig, EngineFacts, RestartResult
from autotune.core.redact import redact, redact_command, redact_text, redact_uri

if TYPE_CHECKING:
    from autotune.study.events import StudyContext
    from autotune.report import Report
    from autotune.decisions.verification import Verification

__all__ = [
    "DEFAULT_TRACKING_URI",
    "MlflowTracker",
    "TrackingError",
    "config_params",
    "engine_tags",
    "experiment_name",
    "log_study",
    "prepare_store",
    "resolve_tracking_uri",
]

DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
#: Tells MLflow 3's UI this is classic model development (a runs table), not a GenAI experiment (traces).
EXPERIMENT_KIND = "custom_model_development"

TAG_KIND = "autotune.kind"
TAG_STUDY = "autotune.study"
#: The id the study was given when it was created: every worker finds the study's one parent run by it.
TAG_STUDY_UID = "autotune.study_uid"
TAG_TRIAL = "autotune.trial_number"
TAG_CONFIG_KEY = "autotune.config_key"
#: Set last on a child run: a run without it was cut short (Ctrl-C, tracking error) and is finished on resume.
TAG_LOGGED = "autotune.logged"
KIND_STUDY, KIND_TRIAL, KIND_VERIFY = "study", "trial", "verification"

#: Trial state -> MLflow run status. A pruned trial is a normal outcome (raced out), not a failure.
_RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "FINISHED", "FAIL": "FAILED"}
#: Tracking stops for the rest of the session after this many failed operations in a row (the store is down).
MAX_FAILURES_IN_A_ROW = 3
#: MLflow HTTP client settings for a tracking server, unless the user set them: ~15 s of retries, not ~4 minutes.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
#: MLflow's per-request limits for log_batch.
_BATCH_PARAMS, _BATCH_TAGS, _BATCH_METRICS = 100, 100, 1000

_log = logging.getLogger(__name__)
_F = TypeVar("_F", bound=Callable[..., Any])


class TrackingError(RuntimeError):
    """Tracking cannot work at all (MLflow missing, store unreachable); the message names the fix."""


# -- pure helpers ----------------------------------------------------------------------------------------


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``, else :data:`DEFAULT_TRACKING_URI`."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to the working directory), else ``None``."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return None if not path or path == ":memory:" else Path(path)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "experiment"


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment's artifacts go: next to a SQLite store (``mlruns/artifacts/<name>``).

    ``None`` for other stores: a tracking server decides its own artifact root.
    """
    db = _sqlite_path(uri)
    if db is None:
        return None
    return (db.parent / "artifacts" / _slug(experiment)).resolve().as_uri()


def _short_model(model: Any) -> str:
    """A hub id stays as it is; a local path becomes its directory name (the rest is machine-specific)."""
    text = str(model or "unknown-model").rstrip("/")
    local = text.startswith((".", "/", "~")) or os.path.isabs(text) or text.count("/") > 1
    return os.path.basename(text) if local else text


def experiment_name(model: Any, facts: EngineFacts) -> str:
    """``autotune/<model>/<gpu>``: runs of one model on one kind of hardware are comparable."""
    gpu = facts.gpu or f"{facts.name or 'engine'}-no-gpu"
    return f"autotune/{_short_model(model)}/{gpu}"


def _param_value(value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=isinstance(value, dict))
    return str(value)


def config_params(config: EngineConfig, prefix: str = "") -> dict[str, str]:
    """MLflow params of a configuration, under vLLM's own names.

    The four searched settings are always present (``default`` / ``none`` when the engine decides), so the
    UI's columns line up across runs; other compilation/speculative keys and the fixed engine arguments
    follow. ``search.<name>`` holds Optuna's own parameters (capture-size preset, draft name).
    """
    out = {
        "compilation_config.cudagraph_mode": _param_value(config.cudagraph_mode),
        "compilation_config.cudagraph_capture_sizes": _param_value(
            None if config.capture_sizes is None else list(config.capture_sizes)),
        "speculative_config.method": config.spec_method or "none",
        "speculative_config.num_speculative_tokens": str(config.num_speculative_tokens),
    }
    for key, value in config.compilation_config.items():
        out.setdefault(f"compilation_config.{key}", _param_value(value))
    for key, value in (config.speculative_config or {}).items():
        out.setdefault(f"speculative_config.{key}", _param_value(value))
    for key, value in config.engine_args.items():
        out.setdefault(str(key), _param_value(value))
    for key, value in config.params.items():
        out.setdefault(f"search.{key}", _param_value(value))
    return {f"{prefix}{k}": v for k, v in out.items()}


def engine_tags(facts: EngineFacts) -> dict[str, str]:
    """Tags for the engine, its version, the GPU, driver and CUDA version, as far as the engine knows them."""
    named = {"engine": facts.name, "engine_version": facts.version, "gpu": facts.gpu, "driver": facts.driver,
             "cuda_version": facts.cuda}
    tags = {name: str(value) for name, value in named.items() if value is not None}
    for key, value in facts.to_dict().items():
        if value is not None and isinstance(value, (str, int, float, bool)):
            tags.setdefault(f"engine_info.{key}", str(value))
    return tags


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def _summary_metrics(summary: Any) -> dict[str, float]:
    """Mean, interval, spread, acceptance length and start-up time of a :class:`TrialSummary`."""
    if summary is None:
        return {}
    unit = _unit_name(getattr(summary, "unit", "tok/s"))
    raw = {
        f"mean_{unit}": summary.mean, "ci_low": summary.ci_low, "ci_high": summary.ci_high, "cv": summary.cv,
        f"std_{unit}": summary.std, "accept_len": summary.accept_len, "startup_s": summary.startup_s,
        "n_restarts": summary.n, "n_cold": summary.n_cold, "n_failed": summary.n_failed,
    }
    return {k: v for k, value in raw.items() if (v := _finite(value)) is not None}


def _unit_name(unit: str) -> str:
    """A value's unit as a metric-name part: ``tok_s``, or ``goodput_req_s`` for the goodput objective."""
    return "tok_s" if unit == "tok/s" else "goodput_req_s"


def _latency_metrics(restarts: Sequence[RestartResult]) -> dict[str, float]:
    """Latency over the counted restarts (``tpot_p99_ms``, ``request_throughput``, ``goodput``...): their means;
    with load levels also each level's, as ``c8.tok_s``, ``c8.tpot_p99_ms``, ``c8.goodput``..."""
    out = {k: v for k, stat in summarize_latency(restarts).items() if (v := _finite(stat.mean)) is not None}
    counted = [r for r in restarts if r.ok and not r.cold and r.levels]
    by_level: dict[int, dict[str, list[float]]] = {}
    for r in counted:
        for level in r.levels:
            figures = by_level.setdefault(level.concurrency, {})
            if level.tok_s is not None:
                figures.setdefault("tok_s", []).append(level.tok_s)
            for key, value in level.latency.items():
                figures.setdefault(key, []).append(value)
    for concurrency, figures in by_level.items():
        for key, values in figures.items():
            if len(values) == len(counted) and (v := _finite(sum(values) / len(values))) is not None:
                out[f"c{concurrency}.{key}"] = v
    return out


def _significant(value: float) -> float:
    """``value`` to 6 significant digits: the UI shows every digit, and noise is in the third already."""
    return float(f"{float(value):.6g}")


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return redact_text(f"{type(exc).__name__}: {(lines[0] if lines else '')[:300]}")


def _ms(dt: Any) -> int | None:
    return None if dt is None else int(dt.timestamp() * 1000)


def _import_mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise TrackingError("mlflow is not installed: pip install 'mlflow>=3.1' (or pass --no-mlflow)") from None
    return mlflow


def _quiet_mlflow_logs() -> None:
    # Creating the SQLite store prints alembic migration INFO lines that would tear through the progress bar.
    for name in ("mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


# -- one connection to a tracking store ------------------------------------------------------------------


def _identity_tag(kind: str | None) -> str:
    """The tag that tells a parent's child runs of one kind apart: a trial's number, a verified config's key."""
    return TAG_TRIAL if kind == KIND_TRIAL else TAG_CONFIG_KEY


@dataclasses.dataclass
class _Child:
    """A child run of the parent: its id, and whether it is complete (carries :data:`TAG_LOGGED`)."""

    run_id: str
    logged: bool = False


def prepare_store(tracking_uri: str | None = None) -> None:
    """Create (or migrate) the tracking store once, before several workers open it at the same moment.

    MLflow creates and migrates a SQLite store's schema when a client first opens it; several processes doing that
    at once race each other (a migration fails half-way in all but one). A server store needs nothing.
    """
    uri = resolve_tracking_uri(tracking_uri)
    if _sqlite_path(uri) is not None:
        _Session(uri).client.search_experiments(max_results=1)


class _Session:
    """An ``MlflowClient`` plus the idempotent operations the tracker and :func:`log_study` share."""

    def __init__(self, tracking_uri: str | None) -> None:
        mlflow = _import_mlflow()
        from mlflow.entities import Metric, Param, RunTag

        self.uri = resolve_tracking_uri(tracking_uri)
        db = _sqlite_path(self.uri)
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        if self.uri.startswith(("http://", "https://")):
            # MLflow retries a failing request for ~4 minutes by default, and the study waits on every tracking
            # call: a server that is down would stall it for minutes per trial. The user's own settings win.
            for name, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(name, value)
        # MLflow prints "View run ... at: <tracking URI>" on stdout when a run ends on a tracking server: that
        # would put the URI (and any password in it) into the report autotune prints there.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        _quiet_mlflow_logs()
        self.client = mlflow.MlflowClient(tracking_uri=self.uri)
        self._metric, self._param, self._tag = Metric, Param, RunTag

    # experiments and runs ------------------------------------------------------------------------------

    def experiment_id(self, name: str) -> str:
        """The id of experiment ``name``, created (or restored from the bin) when needed."""
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                return str(self.client.create_experiment(
                    name, artifact_location=artifact_location(self.uri, name),
                    tags={"mlflow.experimentKind": EXPERIMENT_KIND}))
            except Exception:
                exp = self.client.get_experiment_by_name(name)  # another worker created it first
                if exp is None:
                    raise
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(exp.experiment_id)
        return str(exp.experiment_id)

    def get_run(self, run_id: str) -> Any | None:
        """The active run ``run_id``, or ``None`` if this store has no such run (or it was deleted)."""
        try:
            run = self.client.get_run(run_id)
        except Exception:  # noqa: BLE001 - MLflow raises its own exception for "no such run"
            return None
        return run if run.info.lifecycle_stage == "active" else None

    def find_parent(self, ledger: Ledger, experiment_id: str) -> Any | None:
        """The study's parent run in this store: the one the ledger names, else the one tagged with its id."""
        known = ledger.mlflow_parent_run_id()
        run = self.get_run(known) if known else None
        if run is not None or not ledger.study_uid():
            return run
        found = self.client.search_runs([experiment_id], filter_string=(
            f"tags.`{TAG_KIND}` = '{KIND_STUDY}' and tags.`{TAG_STUDY_UID}` = '{ledger.study_uid()}'"),
            max_results=1, order_by=["attributes.start_time ASC"])
        return found[0] if found else None

    def _adopt_parent(self, ledger: Ledger, run: Any) -> str:
        """Continue an existing parent run: reopen it unless the study is over, and make the ledger name it."""
        if run.info.status != "RUNNING" and not ledger.has_verification():
            self.client.update_run(run.info.run_id, status="RUNNING")
        if ledger.mlflow_parent_run_id() != run.info.run_id:
            ledger.record_mlflow_parent_run_id(run.info.run_id)
        return str(run.info.run_id)

    def open_parent(self, ledger: Ledger, experiment_id: str, meta: StudyMeta, claims: Any = None,
                    wait: Callable[[], None] | None = None) -> tuple[str, bool]:
        """The study's parent run: found by the study's id if it exists, else created, by one worker only.

        With ``claims`` (several workers), creating it is a claim: one worker creates it while the others
        ``wait`` and then find it.

        Returns:
            ``(run_id, created)``.
        """
        claim = None
        while True:
            run = self.find_parent(ledger, experiment_id)
            if run is not None:
                return self._adopt_parent(ledger, run), False
            if claims is None:
                break
            claim = claims.try_claim(MLFLOW_PARENT_JOB)
            if claim is not None or claims.done(MLFLOW_PARENT_JOB):
                # Look again before creating: the worker that held the claim may have created the run (and
                # finished its claim, or died holding it) after this worker looked. Only when there is still
                # none is it ours to create (or it was created in another store: a different tracking URI).
                run = self.find_parent(ledger, experiment_id)
                if run is None:
                    break
                if claim is not None:
                    claim.complete()
                return self._adopt_parent(ledger, run), False
            if wait is not None:
                wait()
        tags = {TAG_KIND: KIND_STUDY, TAG_STUDY: ledger.name, "mlflow.source.name": "autotune",
                "mlflow.source.type": "LOCAL", "space": str(meta.space_name or ""), **engine_tags(meta.engine)}
        if ledger.study_uid():
            tags[TAG_STUDY_UID] = ledger.study_uid()
        created = self.client.create_run(experiment_id, run_name=ledger.name, tags=redact(tags))
        run_id = created.info.run_id
        self.log(run_id, params=_study_params(meta))
        ledger.record_mlflow_parent_run_id(run_id)
        if claim is not None:
            claim.complete()
        return run_id, True

    def children(self, experiment_id: str, parent_id: str) -> dict[tuple[str, str], _Child]:
        """The parent's child runs by identity: ``("trial", "7")`` or ``("verification", config_key)``."""
        found: dict[tuple[str, str], Any] = {}
        token = None
        while True:
            page = self.client.search_runs([experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'",
                                           max_results=1000, page_token=token)
            for run in page:
                kind = run.data.tags.get(TAG_KIND)
                ident = run.data.tags.get(_identity_tag(kind))
                if kind and ident is not None:
                    found[(kind, ident)] = _Child(run.info.run_id, bool(run.data.tags.get(TAG_LOGGED)))
            token = page.token
            if not token:
                return found

    def find_child(self, experiment_id: str, parent_id: str, key: tuple[str, str]) -> _Child | None:
        """The parent's child run of identity ``key`` (see :meth:`children`), if there is one."""
        kind, ident = key
        runs = self.client.search_runs([experiment_id], filter_string=(
            f"tags.`mlflow.parentRunId` = '{parent_id}' and tags.`{TAG_KIND}` = '{kind}' and "
            f"tags.`{_identity_tag(kind)}` = '{ident}'"),
            max_results=1, order_by=["attributes.start_time ASC"])
        return _Child(runs[0].info.run_id, bool(runs[0].data.tags.get(TAG_LOGGED))) if runs else None

    def child_run(self, experiment_id: str, parent_id: str, name: str, tags: Mapping[str, str],
                  start_ms: int | None = None) -> str:
        run = self.client.create_run(experiment_id, start_time=start_ms, run_name=name,
                                     tags=redact({"mlflow.parentRunId": parent_id, **tags}))
        return str(run.info.run_id)

    # logging -------------------------------------------------------------------------------------------

    def log(self, run_id: str, params: Mapping[str, str] | None = None,
            metrics: Iterable[tuple[str, float, int]] = (), tags: Mapping[str, str] | None = None) -> None:
        """Params, ``(key, value, step)`` metrics and tags in as few requests as MLflow's limits allow."""
        now = int(time.time() * 1000)
        # Every value MLflow stores passes redaction: a credential key's value or a URI's password never lands.
        p = [self._param(k, str(redact(str(v), k))[:6000]) for k, v in (params or {}).items()]
        t = [self._tag(k, str(redact(str(v), k))[:8000]) for k, v in (tags or {}).items()]
        m = [self._metric(k, _significant(v), now, int(step)) for k, v, step in metrics]
        while p or t or m:
            self.client.log_batch(run_id, metrics=m[:_BATCH_METRICS], params=p[:_BATCH_PARAMS], tags=t[:_BATCH_TAGS])
            p, t, m = p[_BATCH_PARAMS:], t[_BATCH_TAGS:], m[_BATCH_METRICS:]

    def log_new(self, run_id: str, params: Mapping[str, str] | None = None,
                metrics: Mapping[str, float] | None = None, tags: Mapping[str, str] | None = None) -> None:
        """Like :meth:`log` but skips params already set and metrics already at that value (resumes)."""
        run = self.client.get_run(run_id)
        have_p, have_m = run.data.params, run.data.metrics
        new_p = {k: v for k, v in (params or {}).items() if k not in have_p}
        new_m = [(k, v, 0) for k, v in (metrics or {}).items() if have_m.get(k) != _significant(v)]
        self.log(run_id, params=new_p, metrics=new_m, tags=tags)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """A text artifact, redacted."""
        self.client.log_text(run_id, redact_text(text), artifact_file)

    def log_file(self, run_id: str, path: str, artifact_path: str | None = None) -> None:
        """A text file (a space file, an engine log) as an artifact of the same name, redacted."""
        text = Path(path).read_text(errors="replace")
        name = os.path.basename(path)
        self.log_text(run_id, text, f"{artifact_path}/{name}" if artifact_path else name)

    def logged_steps(self, run_id: str, key: str) -> int:
        return len(self.client.get_metric_history(run_id, key))

    def restart_logs(self, run_id: str, restarts: Sequence[RestartResult]) -> None:
        """The engine log of each failed restart: the log file when it is still there, else its tail."""
        for i, r in enumerate(restarts):
            if r.ok:
                continue
            where = f"logs/restart-{i}-{r.status}"
            if r.log_path and os.path.isfile(r.log_path):
                self.log_file(run_id, r.log_path, artifact_path=where)
            else:
                text = r.log_tail or f"no engine log was kept; error: {r.error}"
                self.log_text(run_id, text, f"{where}/log_tail.txt")

    def finish(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        self.client.set_terminated(run_id, status=status, end_time=end_ms)


def _study_params(meta: StudyMeta) -> dict[str, str]:
    """Study-level params for the parent run, from the metadata the study records once."""
    params: dict[str, Any] = {k: getattr(meta, k) for k in ("space_name", "model", "sampler", "trials", "top_k",
                                                             "verify_restarts", "budget_restarts",
                                                             "budget_minutes", "seed")}
    params.update({f"racing.{k}": v for k, v in meta.racing.items()})
    params.update({f"workload.{k}": v for k, v in meta.workload.items()})
    if meta.baseline is not None:
        params.update({k: v for k, v in meta.baseline.engine_args.items()})
    return {k: _param_value(v) for k, v in params.items() if v is not None}


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
            out.append((_restart_metric(unit), float(r.value), i))  # type: ignore[arg-type]
            for level in r.levels:
                # Per load level as well, whatever the objective: what each level measured, restart by restart.
                if level.tok_s is not None:
                    out.append((f"c{level.concurrency}.restart_tok_s", float(level.tok_s), i))
                if level.latency.get("goodput") is not None:
                    out.append((f"c{level.concurrency}.restart_goodput_req_s", float(level.latency["goodput"]), i))
    return out


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
        """The space file and the exact command, once per parent run."""
        s = self.session
        if space_path and os.path.isfile(space_path):
            s.log_file(self.parent_id, space_path)
        elif self.ledger.space_yaml():
            s.log_text(self.parent_id, self.ledger.space_yaml(), "space.yaml")
        if command:
            s.log_text(self.parent_id, shlex.join(redact_command(command)) + "\n", "command.txt")

    # trials ----------------------------------------------------------------------------------------------

    def start_trial(self, number: int, config: EngineConfig) -> str:
        """Open the trial's run before its restarts, so the UI shows it (and its restarts) as they land."""
        key = (KIND_TRIAL, str(number))
        # Race fix (issue 22): this worker's list of child runs is as old as its last refresh; a peer may have opened
        # this trial's run since (e.g. logging it while this worker's heartbeat was late): one narrow search first.
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
        self._complete(
            (KIND_TRIAL, str(record.number)), _trial_name(record.number, record.config),
            _trial_tags(self.study.study_name, record.number, record.config, self.engine_info),
            config_params(record.config), record.restarts,
            {**_summary_metrics(record.summary), **_latency_metrics(record.restarts)},
            _result_tags(record.summary, record.state, record.reason), _RUN_STATUS.get(record.state, "FAILED"),
            start_ms, end_ms)

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
        values = _restart_metrics(restarts, skip, self.unit) + [(k, v, 0) for k, v in metrics.items()]
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
        s.log_text(self.parent_id, json.dumps(redact(report.to_json()), indent=2, default=str), "report.json")
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
    return params, metrics, tags


# -- the observer ----------------------------------------------------------------------------------------


def _guarded(method: _F) -> _F:
    """Observer methods never raise for tracking problems: the study's measurements come first."""

    @functools.wraps(method)
    def wrapper(self: MlflowTracker, *args: Any, **kwargs: Any) -> Any:
        if self._off:
            return None
        try:
            result = method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any tracking failure is logged and survived
            self._problem(method.__name__, exc)
            return None
        self._failures_in_a_row = 0
        return result

    return wrapper  # type: ignore[return-value]


class MlflowTracker(StudyObserver):
    """Logs a study to MLflow as it runs: parent run, nested trial and verification runs, plots.

    Args:
        tracking_uri: MLflow tracking URI; default ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db``.
        stream: Where the one warning about tracking problems goes (stderr).

    Attributes:
        problems: One line per tracking operation that failed (the first is also printed).
        parent_run_id: The study's parent run, once the study started.
        report: The report logged at the study's end (built once, from the study's context: the CLI prints
            this same object).
    """

    def __init__(self, tracking_uri: str | None = None, stream: IO[str] | None = None) -> None:
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.stream = stream or sys.stderr
        self.problems: list[str] = []
        self.parent_run_id: str | None = None
        self.report: Report | None = None
        self._off = False
        self._log: _StudyLog | None = None
        self._trial_runs: dict[int, tuple[str, int]] = {}  # trial number -> (run id, restarts logged live)
        self._current_trial: int | None = None
        self._ended = False
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
                f"{line}; fix the tracking URI ({redact_uri(self.tracking_uri)}) or pass --no-mlflow")
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
        meta = ctx.ledger.meta() if ctx.ledger.has_meta() else _meta_from_context(ctx)
        self._lone = ctx.owner.get("worker") is None
        self._log = _StudyLog(session, ctx.ledger, meta, ctx.claims, lambda: ctx.sleep(ctx.poll_s))
        self.parent_run_id = self._log.parent_id
        command = [redact(arg) for arg in (list(ctx.options.command) or [os.path.basename(sys.executable), *sys.argv])]
        if self._log.created:
            self._log.provenance(ctx.space.source, command)
        elif self._lone:
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
        from autotune.report import build_report

        self.report = report = build_report(ctx.ledger, engine=ctx.engine, space=ctx.space)
        # Separate steps: trials missing from MLflow must not cost the verification runs or the outcome.
        self._attempt("on_study_end/sync_trials", self._log.sync_trials)
        # A resumed study whose verification finished in an earlier session has no on_verification_end.
        self._attempt("on_study_end/sync_verification", self._log.sync_verification)
        self._attempt("on_study_end/finish_study", self._log.finish_study, report, self._note)
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
        if log.created:
            log.provenance(space_path, list(meta.command))
        log.sync_trials()
        log.sync_verification()
        log.finish_study(build_report(ledger), lambda text: _log.info("MLflow: %s", text))
    except TrackingError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the store, not an MLflow traceback
        raise TrackingError(f"could not log study {ledger.name!r} to "
                            f"{redact_uri(resolve_tracking_uri(tracking_uri))}: "
                            f"{_one_line(exc)}; check the tracking URI (--tracking-uri)") from exc
    return log.parent_id
