"""One connection to a tracking store: an ``MlflowClient`` plus the idempotent operations the tracker and
:func:`~autotune.observers.mlflow.log_study` share."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.core.records import RestartResult
from autotune.core.escape import escape_text
from autotune.core.redact import redact, redact_text
from autotune.core.urls import sqlite_path
from autotune.engines.process import hold_interruptions, release_interruptions
from autotune.observers.mlflow._store_build import ensure_sqlite_store
from autotune.observers.mlflow._conventions import (EXPERIMENT_KIND, HTTP_DEFAULTS, KIND_STUDY, KIND_TRIAL,
    TAG_CONFIG_KEY, TAG_KIND, TAG_LOGGED, TAG_STUDY, TAG_STUDY_UID, TAG_TRIAL, _BATCH_METRICS, _BATCH_PARAMS,
    _BATCH_TAGS, _import_mlflow, _param_value, _quiet_mlflow_logs, _significant, artifact_location, engine_tags,
    resolve_tracking_uri)
from autotune.store.ledger import Ledger, MLFLOW_PARENT_JOB, StudyMeta


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
    if sqlite_path(uri) is not None:
        _Session(uri).client.search_experiments(max_results=1)


class _Uninterrupted:
    """An ``MlflowClient`` whose every call a termination signal waits for (bounded: see
    :func:`autotune.engines.process.hold_interruptions`). Raised inside MLflow's own SQL session, the interruption
    left MLflow's SQLite store locked, and closing the study's runs then failed; delivered just after the call, it
    takes the ordinary path (runs closed, exit 143)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            hold_interruptions()
            try:
                return attr(*args, **kwargs)
            finally:
                release_interruptions()

        return call


class _Session:
    """An ``MlflowClient`` plus the idempotent operations the tracker and :func:`log_study` share."""

    def __init__(self, tracking_uri: str | None) -> None:
        mlflow = _import_mlflow()
        from mlflow.entities import Metric, Param, RunTag

        self.uri = resolve_tracking_uri(tracking_uri)
        db = sqlite_path(self.uri)
        #: Set when a half-built SQLite store was rebuilt (issue 22, FS02): one line for the user.
        self.rebuilt = ensure_sqlite_store(db) if db is not None else None
        if self.uri.startswith(("http://", "https://")):
            # MLflow retries a failing request for ~4 minutes by default, and the study waits on every tracking
            # call: a server that is down would stall it for minutes per trial. The user's own settings win.
            for name, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(name, value)
        # MLflow prints "View run ... at: <tracking URI>" on stdout when a run ends on a tracking server: that
        # would put the URI (and any password in it) into the report autotune prints there.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        _quiet_mlflow_logs()
        self.client = _Uninterrupted(mlflow.MlflowClient(tracking_uri=self.uri))
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
        if uid := ledger.study_uid():
            tags[TAG_STUDY_UID] = uid
        created = self.client.create_run(experiment_id, run_name=escape_text(ledger.name), tags=_shown(tags))
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
        run = self.client.create_run(experiment_id, start_time=start_ms, run_name=escape_text(name),
                                     tags=_shown({"mlflow.parentRunId": parent_id, **tags}))
        return str(run.info.run_id)

    # logging -------------------------------------------------------------------------------------------

    def log(self, run_id: str, params: Mapping[str, str] | None = None,
            metrics: Iterable[tuple[str, float, int]] = (), tags: Mapping[str, str] | None = None) -> None:
        """Params, ``(key, value, step)`` metrics and tags in as few requests as MLflow's limits allow."""
        now = int(time.time() * 1000)
        # Every value MLflow stores passes redaction: a credential key's value or a URI's password never lands; and
        # escaping (issue 44): a label's terminal escapes reach no one who reads the run (the UI, a script).
        p = [self._param(k, escape_text(str(redact(str(v), k)))[:6000]) for k, v in (params or {}).items()]
        t = [self._tag(k, escape_text(str(redact(str(v), k)))[:8000]) for k, v in (tags or {}).items()]
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
        self.client.log_text(run_id, escape_text(redact_text(text)), artifact_file)

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


def _shown(tags: Mapping[str, Any]) -> dict[str, str]:
    """Tags as MLflow stores them: redacted, then escaped (issue 44)."""
    return {k: escape_text(str(v)) for k, v in redact(dict(tags)).items()}
