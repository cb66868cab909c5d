"""A tracked study on the fake engine: its space, its engine (deterministic, one configuration that crashes, one
silent change), its settings, and what it leaves in MLflow. Shared by the tracking, worker and machine-facts
tests."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import mlflow
import yaml

from autotune.records import decode
from autotune.config.space import load_space
from autotune.report._build import build_report
from autotune.core.records import EngineConfig, EngineFacts, Resolved
from autotune.decisions.racing import RacingPolicy
from autotune.observers.mlflow import MlflowTracker
from autotune.store.ledger import Ledger, TrialRecord
from autotune.study import StudyOptions, run_study

from tests.conftest import FakeEngine, store

SPACE = {
    "name": "fake-space",
    "engine_args": {"model": "fake/model-1b", "max_num_seqs": 4, "max_model_len": 1024},
    "workload": {"num_prompts": 4, "input_len": 16, "output_len": 16, "concurrency": 4, "timed_passes": 3},
    "search": {
        "cudagraph_mode": ["NONE", "PIECEWISE", "FULL"],
        "capture_sizes": {"tiny": [1, 2, 4]},
        "num_speculative_tokens": {"low": 0, "high": 2},
        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    },
}
ENGINE_INFO = {"engine": "fake", "engine_version": "1.2.3", "gpu": "Fake GPU 80GB", "driver": "555.42",
               "cuda": "12.8"}
BASE_TOK_S = {None: 100.0, "NONE": 60.0, "PIECEWISE": 110.0, "FULL": 125.0}


def _value(config: EngineConfig, restart: int, seed: int) -> float:
    k = config.num_speculative_tokens
    return BASE_TOK_S[config.cudagraph_mode] + 9.0 * k + ((seed * 7 + restart * 3) % 5 - 2) * 0.5


def _crashes(config: EngineConfig) -> str | None:
    if config.cudagraph_mode == "FULL" and config.num_speculative_tokens == 2:
        return "RuntimeError: CUDA error: an illegal memory access"
    return None


def _resolve(config: EngineConfig) -> Resolved:
    # FULL with speculation resolves to FULL_AND_PIECEWISE: a silent change, as vLLM makes.
    mode, k = config.cudagraph_mode, config.num_speculative_tokens
    return Resolved(cudagraph_mode="FULL_AND_PIECEWISE" if (mode is None or (mode == "FULL" and k)) else mode,
                    cudagraph_capture_sizes=config.capture_sizes or (1, 2, 4, 8))


def fake_engine(interrupt_after: int | None = None) -> FakeEngine:
    """Deterministic throughput per configuration; FULL with K=2 always crashes; first starts are cold (not slow);
    ``interrupt_after`` restarts, then Ctrl-C."""
    return FakeEngine(value=_value, fail=_crashes, resolve=_resolve, cold_first=True, cold_factor=1.0,
                      cold_wall_s=10.0, wall_s=10.0, startup_s=3.0, interrupt_after=interrupt_after,
                      accept_len=lambda c: 1.0 + 0.6 * c.num_speculative_tokens if c.num_speculative_tokens else None,
                      latency=lambda c: {"tpot_p99_ms": 1000.0 / BASE_TOK_S[c.cudagraph_mode], "ttft_p99_ms": 50.0},
                      facts=decode(EngineFacts, ENGINE_INFO))


def write_space(tmp: Path) -> Path:
    path = tmp / "fake-space.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    return path


#: Fixed restarts per trial, so an interruption lands at a known point whatever racing decides.
FIXED = RacingPolicy(min_restarts=3, racing=False)


def options(tmp: Path, **kw: Any) -> StudyOptions:
    defaults = dict(study_name="fake-study", storage=f"sqlite:///{tmp}/optuna.db", workdir=str(tmp / "work"),
                    trials=6, policy=RacingPolicy(min_restarts=2, max_restarts=3), top_k=2, verify_restarts=2,
                    command=("autotune", "tune", "--space", "fake-space.yaml", "--engine", "fake"))
    defaults.update(kw)
    return StudyOptions(**defaults)


def tracked_study(tmp: Path, stream: io.StringIO | None = None, engine: FakeEngine | None = None,
                  **kw: Any) -> tuple[Ledger, MlflowTracker]:
    tracker = MlflowTracker(tracking_uri=store(tmp), stream=stream or io.StringIO())
    space, engine = load_space(write_space(tmp)), engine or fake_engine()
    study = run_study(space, engine, options(tmp, **kw), [tracker])
    tracker.on_report(build_report(study, engine=engine, space=space))  # as autotune tune hands it over
    return study, tracker


def client_for(tmp: Path) -> Any:
    return mlflow.MlflowClient(store(tmp))


def child_runs(client: Any, parent: Any, kind: str) -> list[Any]:
    runs = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'", max_results=1000)
    return [r for r in runs if r.data.tags.get("autotune.kind") == kind]


def measured_trials(ledger: Ledger) -> list[TrialRecord]:
    done = ("COMPLETE", "PRUNED", "FAIL")
    return [r for r in ledger.trial_records() if r.state in done and r.duplicate_of is None]
