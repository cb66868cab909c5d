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

from autotune.observers.mlflow._conventions import (DEFAULT_TRACKING_URI, EXPERIMENT_KIND, HTTP_DEFAULTS, KIND_STUDY,
    KIND_TRIAL, KIND_VERIFY, MAX_FAILURES_IN_A_ROW, TAG_CONFIG_KEY, TAG_KIND, TAG_LOGGED, TAG_STUDY, TAG_STUDY_UID,
    TAG_TRIAL, TrackingError, artifact_location, config_params, engine_tags, experiment_name, resolve_tracking_uri,
    tracking_uri_problem)
from autotune.observers.mlflow._session import prepare_store
from autotune.observers.mlflow._recheck import KIND_RECHECK, log_recheck
from autotune.observers.mlflow._tracker import MlflowTracker, log_study

__all__ = [
    "DEFAULT_TRACKING_URI",
    "EXPERIMENT_KIND",
    "HTTP_DEFAULTS",
    "KIND_RECHECK",
    "KIND_STUDY",
    "KIND_TRIAL",
    "KIND_VERIFY",
    "MAX_FAILURES_IN_A_ROW",
    "TAG_CONFIG_KEY",
    "TAG_KIND",
    "TAG_LOGGED",
    "TAG_STUDY",
    "TAG_STUDY_UID",
    "TAG_TRIAL",
    "MlflowTracker",
    "TrackingError",
    "artifact_location",
    "config_params",
    "engine_tags",
    "experiment_name",
    "log_recheck",
    "log_study",
    "prepare_store",
    "resolve_tracking_uri",
    "tracking_uri_problem",
]
