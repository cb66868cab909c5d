"""The seed note's trap in its most common form: speculation silently changes what the default mode resolves to."""

from __future__ import annotations

import io

from autotune.decisions.racing import RacingPolicy
from autotune.core.records import EngineConfig, Resolved, speculation_plan_change
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_study
from autotune.observers.mlflow import MlflowTracker
from tests.conftest import SMALL_SPACE, FakeEngine
from tests.conftest import store

CHANGED = "cudagraph_mode: configured default (FULL_AND_PIECEWISE without speculation) -> resolved PIECEWISE"


def _resolve(config: EngineConfig) -> Resolved:
    mode = config.cudagraph_mode
    if mode is None:  # vLLM's default is FULL_AND_PIECEWISE, but K=2 speculation quietly downgrades it
        mode = "PIECEWISE" if config.num_speculative_tokens == 2 else "FULL_AND_PIECEWISE"
    return Resolved(cudagraph_mode=mode, cudagraph_capture_sizes=config.capture_sizes or (1, 2, 4, 8))


def _truth(config: EngineConfig) -> float:
    if config.cudagraph_mode is None:
        return {0: 100.0, 1: 120.0, 2: 170.0}[config.num_speculative_tokens]
    return {"NONE": 40.0, "PIECEWISE": 110.0, "FULL_AND_PIECEWISE": 130.0}[config.cudagraph_mode]


def test_a_default_mode_winner_downgraded_by_speculation_is_flagged_everywhere(tmp_path):
    options = StudyOptions(study_name="spec", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"),
                           trials=6, policy=RacingPolicy(min_restarts=2, racing=False), top_k=2, verify_restarts=2,
                           enqueue=({"cudagraph_mode": "default", "capture_sizes": "default",
                                     "num_speculative_tokens": 1, "draft": "ngram"},))
    tracker = MlflowTracker(tracking_uri=store(tmp_path), stream=io.StringIO())
    space, engine = parse_space(SMALL_SPACE), FakeEngine(_truth, resolve=_resolve)
    ledger = run_study(space, engine, options, [tracker])
    tracker.on_report(build_report(ledger, engine=engine, space=space))
    records = {(r.config.cudagraph_mode, r.config.num_speculative_tokens): r for r in ledger.trial_records()}
    assert CHANGED in records[(None, 2)].summary.differences  # the trial
    assert records[(None, 1)].summary.differences == ()  # same default plan with K=1: nothing to flag
    assert records[(None, 0)].summary.differences == ()  # the baseline itself
    report = build_report(ledger)
    assert report.winner is not None and report.winner.label == "default-mode default-sizes ngram K=2"
    assert CHANGED in report.winner.differences  # the winner
    assert any(CHANGED in w.differences for w in report.warnings)  # the report's warning list
    text = render_report(report)
    assert "WARNING: the winner itself did not run as configured" in text and "without speculation" in text
    import mlflow

    client = mlflow.MlflowClient(store(tmp_path))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    trial_tags = [r.data.tags.get("resolved.differences", "") for r in runs]
    assert any(CHANGED in t for t in trial_tags)  # MLflow: the trial's run
    parent = next(r for r in runs if r.info.run_id == tracker.parent_run_id)
    assert CHANGED in parent.data.tags["winner.resolved_differences"]  # MLflow: the study's run


def test_the_rule():
    spec = EngineConfig(speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    assert str(speculation_plan_change(spec, "PIECEWISE", "FULL_AND_PIECEWISE")) == CHANGED
    assert speculation_plan_change(spec, "CUDAGraphMode.FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE") is None
    assert speculation_plan_change(spec, "PIECEWISE", None) is None  # no reference measured: nothing to say
    configured = EngineConfig(compilation_config={"cudagraph_mode": "FULL"},
                              speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    assert speculation_plan_change(configured, "PIECEWISE", "FULL_AND_PIECEWISE") is None  # config_differences' job
    assert speculation_plan_change(EngineConfig(), "PIECEWISE", "FULL_AND_PIECEWISE") is None  # no speculation
