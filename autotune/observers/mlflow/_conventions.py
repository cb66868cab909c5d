"""What the tracker writes: tag names, experiment and param naming, metrics from summaries and restarts."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Sequence
from typing import Any

from autotune.records import encode
from autotune.core.records import EngineConfig, EngineFacts, RestartResult
from autotune.core.redact import redact_text
from autotune.core.urls import sqlite_path
from autotune.stats.latency import summarize_latency


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


class TrackingError(RuntimeError):
    """Tracking cannot work at all (MLflow missing, store unreachable); the message names the fix."""


# -- pure helpers ----------------------------------------------------------------------------------------


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri``, else ``$MLFLOW_TRACKING_URI``, else :data:`DEFAULT_TRACKING_URI`."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


#: Schemes MLflow registers for tracking but refuses to track to (its Unity Catalog model registries).
_REGISTRY_ONLY = ("databricks-uc", "uc")


def tracking_uri_problem(uri: str) -> str | None:
    """Why MLflow cannot track to ``uri``, or ``None``: a scheme MLflow's tracking-store registry does not know
    (its own lookup, plug-ins included, without building the store: nothing is created or contacted), or a URI its
    store would fail to open (an unparsable host or port, a database URL SQLAlchemy cannot read, an SQLite database
    kept in memory, a path that is empty). The text never repeats ``uri``: it may hold a password."""
    import urllib.parse

    try:
        parsed = urllib.parse.urlparse(uri)
        parsed.port  # noqa: B018 - parsing the port is the check (a port that is not a number raises)
    except ValueError as exc:
        return f"not a URI MLflow can read ({exc})"
    try:
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry
        from mlflow.utils.uri import get_uri_scheme

        # MLflow leaves get_uri_scheme unannotated.
        scheme = uri if uri in {"databricks", *_REGISTRY_ONLY} else str(get_uri_scheme(uri))  # type: ignore[no-untyped-call]
        known = getattr(_tracking_store_registry, "_registry", None)
    except Exception:  # noqa: BLE001 - MLflow missing or its internals moved: the tracker says so when it starts
        return None
    if scheme in _REGISTRY_ONLY:
        return f"'{scheme}' is a model-registry URI, which MLflow does not track to"
    if isinstance(known, dict) and scheme not in known:
        schemes = ", ".join(sorted(s for s in known if s and s not in _REGISTRY_ONLY))
        return f"MLflow knows no tracking store for the scheme '{scheme}' (it knows {schemes}, or a local path)"
    if scheme in ("http", "https") and not parsed.hostname:
        return f"the {scheme} URI names no host"
    if scheme in ("", "file") and not parsed.path:
        return "the file store's path is empty"
    if scheme not in ("", "file", "http", "https", "databricks"):  # a database: SQLAlchemy opens it
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(uri)
        except (ArgumentError, ValueError) as exc:
            return f"not a database URL SQLAlchemy can read ({type(exc).__name__})"
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            return "an SQLite database in memory keeps nothing once the command ends"
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "experiment"


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment's artifacts go: next to a SQLite store (``mlruns/artifacts/<name>``).

    ``None`` for other stores: a tracking server decides its own artifact root.
    """
    db = sqlite_path(uri)
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
    for key, value in encode(facts).items():
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
