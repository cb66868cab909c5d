"""A whole study on the services several workers share: Optuna on PostgreSQL, MLflow on a tracking server."""

from __future__ import annotations

import io

import optuna
import pytest
from optuna.trial import TrialState

from autotune.decisions.racing import RacingPolicy
from autotune.report._build import build_report
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_study
from autotune.store.ledger import Ledger
from autotune.observers.mlflow import KIND_TRIAL, TAG_KIND, TAG_TRIAL, MlflowTracker
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

pytestmark = pytest.mark.services

#: The capture mode decides: any FULL_AND_PIECEWISE configuration wins, whichever K the sampler pairs it with.
TRUTH = {("FULL_AND_PIECEWISE", k): 300.0 + 10.0 * k for k in range(3)} | {("PIECEWISE", 1): 200.0, ("NONE", 0): 40.0}


def test_a_study_on_postgresql_logs_to_the_mlflow_server(postgres_url: str, mlflow_server_uri: str,
                                                         tmp_path) -> None:
    mlflow = pytest.importorskip("mlflow")
    tracker = MlflowTracker(tracking_uri=mlflow_server_uri, stream=io.StringIO())
    options = StudyOptions(study_name=f"pg-{tmp_path.name}", storage=postgres_url, workdir=str(tmp_path), trials=6,
                           policy=RacingPolicy(min_restarts=2, racing=False), top_k=2, verify_restarts=2, seed=1)
    space, engine = parse_space(SMALL_SPACE), FakeEngine(by_params(TRUTH))
    tracker.on_report(build_report(run_study(space, engine, options, [tracker]), engine=engine, space=space))
    tracker.close()
    assert tracker.problems == []

    # Everything is in PostgreSQL: a fresh connection sees the finished study and its verification.
    ledger = Ledger(optuna.load_study(study_name=options.study_name, storage=postgres_url))
    report = build_report(ledger)
    assert report.winner is not None and report.winner.config.params["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    done = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    measured = {t.number for t in ledger.study.get_trials(states=done)
                if ledger.has_config(t) and not ledger.is_duplicate(t)}

    # ... and on the tracking server: one parent, one child per measured trial.
    client = mlflow.MlflowClient(tracking_uri=mlflow_server_uri)
    parent = client.get_run(ledger.mlflow_parent_run_id())
    assert parent.info.status == "FINISHED" and parent.data.tags["verdict"]
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    trial_runs = sorted(int(r.data.tags[TAG_TRIAL]) for r in children if r.data.tags.get(TAG_KIND) == KIND_TRIAL)
    assert trial_runs == sorted(measured)
