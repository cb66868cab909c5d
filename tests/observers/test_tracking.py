"""MLflow tracking: the runs a study leaves, resumes without duplicates, failures that never stop a study."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.records import decoder
from autotune.store import ledger as ledger_mod
from autotune.store.ledger import Ledger
from autotune.report.plots import PLOT_FILES, save_study_plots
from autotune.core.records import EngineConfig, EngineFacts, RestartResult
from autotune.report._build import build_report
from autotune.config.space import load_space
from autotune.study import Interrupted, run_study
from autotune.observers.mlflow import (
    MlflowTracker,
    TrackingError,
    config_params,
    engine_tags,
    experiment_name,
    log_study,
    resolve_tracking_uri,
)

from tests._helpers.tracking import (FIXED, child_runs, client_for, fake_engine, measured_trials, options, tracked_study,
                                     write_space)
from tests.conftest import store

mlflow = pytest.importorskip("mlflow")

def artifact_paths(client: Any, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        out |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One tracked study, shared by the assertions below (a study costs a few seconds)."""
    tmp = tmp_path_factory.mktemp("tracked")
    stream = io.StringIO()
    study, tracker = tracked_study(tmp, stream)
    client = client_for(tmp)
    parent = client.get_run(study.mlflow_parent_run_id())
    return {"tmp": tmp, "study": study, "tracker": tracker, "client": client, "parent": parent, "stream": stream}


# -- pure helpers ----------------------------------------------------------------------------------------


def test_config_params_use_vllm_names_and_always_name_the_searched_settings() -> None:
    cfg = EngineConfig(engine_args={"model": "m", "max_num_seqs": 4},
                       compilation_config={"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [4, 1, 2]},
                       speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5},
                       params={"capture_sizes": "tiny"})
    params = config_params(cfg)
    assert params["compilation_config.cudagraph_mode"] == "PIECEWISE"
    assert params["compilation_config.cudagraph_capture_sizes"] == "[1, 2, 4]"
    assert params["speculative_config.method"] == "ngram"
    assert params["speculative_config.num_speculative_tokens"] == "3"
    assert params["speculative_config.prompt_lookup_max"] == "5"
    assert params["max_num_seqs"] == "4" and params["model"] == "m"
    assert params["search.capture_sizes"] == "tiny"
    defaults = config_params(EngineConfig(engine_args={"model": "m"}))
    assert defaults["compilation_config.cudagraph_mode"] == "default"
    assert defaults["compilation_config.cudagraph_capture_sizes"] == "default"
    assert defaults["speculative_config.method"] == "none"
    assert defaults["speculative_config.num_speculative_tokens"] == "0"


def test_experiment_name_is_model_and_gpu_and_engine_tags_map_known_facts() -> None:
    facts = decoder(EngineFacts)
    assert experiment_name("Qwen/Qwen3-0.6B", facts({"gpu": "NVIDIA H200"})) == "autotune/Qwen/Qwen3-0.6B/NVIDIA H200"
    assert (experiment_name("/data/models/llama-3b/", facts({"gpu": "simulated GB10"}))
            == "autotune/llama-3b/simulated GB10")
    assert experiment_name("m/x", facts({"engine": "vllm", "gpu": None})) == "autotune/m/x/vllm-no-gpu"
    tags = engine_tags(facts({"engine": "vllm", "vllm": "0.11.0", "gpu": "H200", "driver": "570", "cuda": "12.8"}))
    assert tags["engine"] == "vllm" and tags["engine_version"] == "0.11.0" and tags["gpu"] == "H200"
    assert tags["driver"] == "570" and tags["cuda_version"] == "12.8"


def test_tracking_uri_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == "sqlite:///mlruns/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.team:5000")
    assert resolve_tracking_uri() == "http://mlflow.team:5000"
    assert resolve_tracking_uri("sqlite:///x.db") == "sqlite:///x.db"


# -- a tracked study -------------------------------------------------------------------------------------


def test_experiment_per_model_and_gpu_with_artifacts_under_the_store(finished: dict[str, Any]) -> None:
    client, parent, tmp = finished["client"], finished["parent"], finished["tmp"]
    exp = client.get_experiment(parent.info.experiment_id)
    assert exp.name == "autotune/fake/model-1b/Fake GPU 80GB"
    assert exp.artifact_location.startswith((tmp / "mlruns").as_uri())
    assert parent.info.artifact_uri.startswith((tmp / "mlruns").as_uri())
    assert finished["tracker"].problems == [] and finished["stream"].getvalue() == ""


def test_one_nested_run_per_measured_trial_with_params_tags_and_metrics(finished: dict[str, Any]) -> None:
    client, parent, study = finished["client"], finished["parent"], finished["study"]
    runs = {int(r.data.tags["autotune.trial_number"]): r for r in child_runs(client, parent, "trial")}
    records = {r.number: r for r in measured_trials(study)}
    assert set(runs) == set(records) and len(runs) >= 4
    for number, rec in records.items():
        run = runs[number]
        p, t, m = run.data.params, run.data.tags, run.data.metrics
        assert p["compilation_config.cudagraph_mode"] == (rec.config.cudagraph_mode or "default")
        assert p["speculative_config.num_speculative_tokens"] == str(rec.config.num_speculative_tokens)
        assert p["speculative_config.method"] == (rec.config.spec_method or "none")
        assert p["max_num_seqs"] == "4" and p["model"] == "fake/model-1b"
        assert t["trial_state"] == rec.state and t["autotune.config_key"] == rec.config.key()
        assert t["engine"] == "fake" and t["engine_version"] == "1.2.3" and t["gpu"] == "Fake GPU 80GB"
        assert t["driver"] == "555.42" and t["cuda_version"] == "12.8"
        assert run.info.run_name.startswith(f"trial {number:03d} ")
        assert run.info.status == ("FAILED" if rec.state == "FAIL" else "FINISHED")
        history = client.get_metric_history(run.info.run_id, "restart_tok_s")
        assert [h.step for h in history] == list(range(rec.summary.n))
        assert [h.value for h in history] == pytest.approx(list(rec.summary.values), rel=1e-5)
        if rec.summary.n:
            assert m["mean_tok_s"] == pytest.approx(rec.summary.mean, rel=1e-5)
            assert m["startup_s"] == pytest.approx(3.0)
        if rec.summary.n >= 2:
            assert m["ci_low"] <= m["mean_tok_s"] <= m["ci_high"] and "cv" in m
        if rec.config.num_speculative_tokens and rec.summary.n:
            assert m["accept_len"] == pytest.approx(1.0 + 0.6 * rec.config.num_speculative_tokens)
        if rec.summary.n:  # latency: the mean over counted restarts of each one's percentile
            counted = [r for r in rec.restarts if r.ok and not r.cold]
            assert m["tpot_p99_ms"] == pytest.approx(sum(r.latency["tpot_p99_ms"] for r in counted) / len(counted),
                                                     rel=1e-5)
            assert m["ttft_p99_ms"] == pytest.approx(50.0)


def test_resolved_config_is_tagged_and_a_silent_change_is_flagged(finished: dict[str, Any]) -> None:
    runs = child_runs(finished["client"], finished["parent"], "trial")
    baseline = next(r for r in runs if r.data.params["compilation_config.cudagraph_mode"] == "default"
                    and r.data.params["speculative_config.num_speculative_tokens"] == "0")
    assert baseline.data.tags["resolved.cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert baseline.data.tags["resolved_differs"] == "false"  # nothing was configured, so nothing differs
    changed = [r for r in runs if r.data.tags.get("resolved_differs") == "true"]
    for run in changed:
        assert run.data.params["compilation_config.cudagraph_mode"] == "FULL"
        assert "FULL_AND_PIECEWISE" in run.data.tags["resolved.differences"]


def test_failed_trial_has_reason_and_engine_log_artifact(finished: dict[str, Any], tmp_path: Path) -> None:
    client, parent = finished["client"], finished["parent"]
    failed = [r for r in child_runs(client, parent, "trial") if r.data.tags["trial_state"] == "FAIL"]
    if not failed:
        pytest.skip("the sampler did not try the crashing configuration in this study")
    run = failed[0]
    assert "illegal memory access" in run.data.tags["failure_reason"]
    logs = [p for p in artifact_paths(client, run.info.run_id) if p.startswith("logs/")]
    assert logs, "a failed restart's engine log must be attached"
    local = client.download_artifacts(run.info.run_id, logs[0], str(tmp_path))
    assert "RuntimeError: CUDA error" in Path(local).read_text()


def test_crashing_restart_log_file_is_attached(tmp_path: Path) -> None:
    """A restart whose log file still exists has the file itself attached, not its tail."""
    from autotune.observers.mlflow._session import _Session

    log_file = tmp_path / "engine.log"
    log_file.write_text("full engine log\nRuntimeError: boom\n")
    session = _Session(store(tmp_path))
    exp = session.experiment_id("autotune/x/y")
    run_id = session.client.create_run(exp).info.run_id
    session.restart_logs(run_id, [RestartResult.failure("failed", "boom", log_path=str(log_file), log_tail="tail"),
                                  RestartResult.failure("timeout", "slow", log_tail="the tail")])
    paths = artifact_paths(session.client, run_id)
    assert paths == {"logs/restart-0-failed/engine.log", "logs/restart-1-timeout/log_tail.txt"}


def test_verification_runs_one_per_config_and_parent_holds_the_outcome(finished: dict[str, Any]) -> None:
    client, parent, study = finished["client"], finished["parent"], finished["study"]
    report = build_report(study)
    verify = child_runs(client, parent, "verification")
    keys = {e.config.key() for e in report.verification.entries}
    assert {r.data.tags["autotune.config_key"] for r in verify} == keys and len(verify) == len(keys)
    winner_runs = [r for r in verify if r.data.tags["winner"] == "true"]
    assert len(winner_runs) == 1 and winner_runs[0].info.run_name.startswith("verify winner: ")
    for run in verify:
        assert len(client.get_metric_history(run.info.run_id, "restart_tok_s")) == 2  # verify_restarts
    parent = client.get_run(parent.info.run_id)
    p, m, t = parent.data.params, parent.data.metrics, parent.data.tags
    winner_cfg = report.winner.config
    assert p["winner.compilation_config.cudagraph_mode"] == (winner_cfg.cudagraph_mode or "default")
    assert p["winner.speculative_config.num_speculative_tokens"] == str(winner_cfg.num_speculative_tokens)
    assert m["winner_mean_tok_s"] == pytest.approx(report.winner.mean, rel=1e-5)
    assert m["winner_ci_low"] <= m["winner_mean_tok_s"] <= m["winner_ci_high"]
    assert m["speedup"] == pytest.approx(report.winner.speedup.speedup, rel=1e-5)
    assert m["speedup_ci_low"] <= m["speedup"] <= m["speedup_ci_high"]
    assert t["verdict"] == report.verdict and t["winner"] == report.winner.label
    assert parent.info.status == "FINISHED" and parent.info.run_name == "fake-study"


def test_parent_has_space_command_report_and_plots(finished: dict[str, Any], tmp_path: Path) -> None:
    client, parent = finished["client"], finished["parent"]
    paths = artifact_paths(client, parent.info.run_id)
    assert {"fake-space.yaml", "command.txt", "report.json", "report.txt"} <= paths
    assert {f"plots/{name}" for name in PLOT_FILES.values()} <= paths
    command = Path(client.download_artifacts(parent.info.run_id, "command.txt", str(tmp_path))).read_text()
    assert command.strip() == "autotune tune --space fake-space.yaml --engine fake"
    png = Path(client.download_artifacts(parent.info.run_id, "plots/winner_vs_baseline.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- resume, interruption, after the fact ----------------------------------------------------------------


def test_interrupted_study_resumes_into_the_same_parent_without_duplicates(tmp_path: Path) -> None:
    tracker = MlflowTracker(tracking_uri=store(tmp_path), stream=io.StringIO())
    with pytest.raises(Interrupted):
        run_study(load_space(write_space(tmp_path)), fake_engine(interrupt_after=6), options(tmp_path, policy=FIXED),
                  [tracker])
    tracker.close()  # what the CLI does on Ctrl-C
    client = client_for(tmp_path)
    first = client.get_run(tracker.parent_run_id)
    assert first.info.status == "KILLED"
    cut_short = [r for r in child_runs(client, first, "trial") if not r.data.tags.get("autotune.logged")]
    assert len(cut_short) == 1 and cut_short[0].info.status == "KILLED"
    # Restarts are logged as they land, so those measured before Ctrl-C are in MLflow already.
    cut = next(r for r in ledger_mod.load("fake-study", f"sqlite:///{tmp_path}/optuna.db").trial_records()
               if r.interrupted)
    counted = [r for r in cut.restarts if r.ok and not r.cold]
    assert counted, "the test should interrupt a trial after a counted restart"
    live = client.get_metric_history(cut_short[0].info.run_id, "restart_tok_s")
    assert [h.value for h in live] == pytest.approx([r.value for r in counted], rel=1e-5)

    study, tracker = tracked_study(tmp_path)
    parent = client.get_run(study.mlflow_parent_run_id())
    assert parent.info.run_id == first.info.run_id and tracker.problems == []
    assert parent.info.status == "FINISHED"
    runs = child_runs(client, parent, "trial")
    numbers = [r.data.tags["autotune.trial_number"] for r in runs]
    assert len(numbers) == len(set(numbers)), "a trial was logged twice"
    assert {int(n) for n in numbers} == {r.number for r in measured_trials(study)}
    for run in runs:
        assert run.info.status in ("FINISHED", "FAILED") and run.data.tags["autotune.logged"] == "true"
        steps = [h.step for h in client.get_metric_history(run.info.run_id, "restart_tok_s")]
        assert steps == list(range(len(steps))), "a restart was logged twice"
    interrupted = next(r for r in runs if r.info.run_id == cut_short[0].info.run_id)
    assert interrupted.info.status == "FAILED" and "interrupted" in interrupted.data.tags["failure_reason"]
    studies = client.search_runs([parent.info.experiment_id], filter_string="tags.`autotune.kind` = 'study'")
    assert len(studies) == 1


def test_resumed_study_with_more_trials_adds_only_new_trials(tmp_path: Path) -> None:
    study, _ = tracked_study(tmp_path, trials=3, verify=False)
    client = client_for(tmp_path)
    parent_id = study.mlflow_parent_run_id()
    before = {r.info.run_id for r in child_runs(client, client.get_run(parent_id), "trial")}
    study, _ = tracked_study(tmp_path, trials=5)
    parent = client.get_run(study.mlflow_parent_run_id())
    after = child_runs(client, parent, "trial")
    assert parent.info.run_id == parent_id
    assert before < {r.info.run_id for r in after}
    assert len(after) == len(measured_trials(study))
    # One run per verified configuration (the candidates and the baseline), verified once.
    assert len(child_runs(client, parent, "verification")) == len(study.verification().entries) >= 2


def test_log_study_after_the_fact_is_complete_and_idempotent(tmp_path: Path) -> None:
    space_path = write_space(tmp_path)
    study = run_study(load_space(space_path), fake_engine(), options(tmp_path, trials=4))  # as with --no-mlflow
    assert study.mlflow_parent_run_id() is None
    uri = store(tmp_path)
    parent_id = log_study(study, space_path=str(space_path), tracking_uri=uri)
    client = client_for(tmp_path)
    parent = client.get_run(parent_id)
    trials = child_runs(client, parent, "trial")
    assert len(trials) == len(measured_trials(study))
    assert len(child_runs(client, parent, "verification")) == len(study.verification().entries) >= 2
    assert "plots/optimization_history.png" in artifact_paths(client, parent_id)
    assert parent.info.status == "FINISHED"
    # Trial runs keep the study's own timing, not the time of logging.
    t0 = min(t.datetime_start for t in study.study.trials if t.datetime_start)
    assert min(r.info.start_time for r in trials) <= int(t0.timestamp() * 1000) + 1000

    again = log_study(study, space_path=str(space_path), tracking_uri=uri)
    assert again == parent_id
    assert len(child_runs(client, parent, "trial")) == len(trials)
    for run in trials:
        assert len(client.get_metric_history(run.info.run_id, "restart_tok_s")) == int(run.data.metrics.get(
            "n_restarts", 0))


# -- failures never stop a study -------------------------------------------------------------------------


def test_unreachable_store_warns_once_and_the_study_completes(tmp_path: Path) -> None:
    stream = io.StringIO()
    tracker = MlflowTracker(tracking_uri="bogus-scheme://nowhere", stream=stream)
    study = run_study(load_space(write_space(tmp_path)), fake_engine(), options(tmp_path, trials=3, top_k=1),
                      [tracker])
    assert study.verification() is not None
    lines = [line for line in stream.getvalue().splitlines() if line]
    assert len(lines) == 1 and "MLflow tracking is off" in lines[0] and "--no-mlflow" in lines[0]


def test_the_tracker_builds_no_report_and_logs_the_one_it_is_handed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import autotune.report as report_api

    built: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return build_report(*args, **kwargs)

    monkeypatch.setattr(report_api, "build_report", counting)
    tracker = MlflowTracker(tracking_uri=store(tmp_path), stream=io.StringIO())
    space, engine = load_space(write_space(tmp_path)), fake_engine()
    study = run_study(space, engine, options(tmp_path, trials=3, top_k=1), [tracker])
    assert built == [], "the study's end builds no report: its caller does, once"
    client = client_for(tmp_path)
    assert client.get_run(tracker.parent_run_id).info.status == "RUNNING", "the outcome is still due"
    # What the tracker is handed is what it logs (here a report whose verdict no study would give).
    handed = dataclasses.replace(build_report(study, engine=engine, space=space), verdict="handed-over")
    tracker.on_report(handed)
    parent = client.get_run(tracker.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["verdict"] == "handed-over"
    tracker.on_report(handed)  # once only: the parent run is closed
    tracker.close()
    assert client.get_run(tracker.parent_run_id).info.status == "FINISHED"


def test_a_concluded_study_closed_without_its_report_is_killed_and_resumed(tmp_path: Path) -> None:
    tracker = MlflowTracker(tracking_uri=store(tmp_path), stream=io.StringIO())
    space = load_space(write_space(tmp_path))
    run_study(space, fake_engine(), options(tmp_path, trials=3, top_k=1), [tracker])
    tracker.close()  # the caller died before handing the report over
    client = client_for(tmp_path)
    assert client.get_run(tracker.parent_run_id).info.status == "KILLED"
    study, again = tracked_study(tmp_path, trials=3, top_k=1)  # the same command again: the outcome is logged
    assert again.parent_run_id == tracker.parent_run_id
    parent = client.get_run(again.parent_run_id)
    assert parent.info.status == "FINISHED" and "verdict" in parent.data.tags


def test_failing_operation_mid_study_warns_once_and_the_study_completes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.observers.mlflow._study_log import _StudyLog

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("tracking server returned 503\nlong body")

    monkeypatch.setattr(_StudyLog, "log_trial", broken)
    stream = io.StringIO()
    study, tracker = tracked_study(tmp_path, stream, trials=4, top_k=1)
    assert study.verification() is not None and len(tracker.problems) >= 2
    text = stream.getvalue()
    assert text.count("MLflow tracking problem") == 1 and "503" in text and "long body" not in text
    # Verification and the parent's outcome are still logged.
    client = client_for(tmp_path)
    parent = client.get_run(study.mlflow_parent_run_id())
    assert parent.info.status == "FINISHED" and "verdict" in parent.data.tags


def test_missing_mlflow_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/o.db")
    with pytest.raises(TrackingError, match=r"pip install 'mlflow>=3.1'.*--no-mlflow"):
        log_study(Ledger(study), tracking_uri=f"sqlite:///{tmp_path}/m.db")
    stream = io.StringIO()
    tracker = MlflowTracker(tracking_uri=f"sqlite:///{tmp_path}/m.db", stream=stream)
    run_study(load_space(write_space(tmp_path)), fake_engine(), options(tmp_path, trials=2, verify=False), [tracker])
    assert "mlflow is not installed" in stream.getvalue()


def test_default_store_is_sqlite_under_mlruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store(tmp_path)  # the migrated empty store, where the default URI looks: ./mlruns/mlflow.db
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracker = MlflowTracker(stream=io.StringIO())
    study = run_study(load_space(write_space(tmp_path)), fake_engine(),
                      options(tmp_path, trials=2, verify=False), [tracker])
    assert tracker.problems == []
    client = mlflow.MlflowClient("sqlite:///mlruns/mlflow.db")
    parent = client.get_run(study.mlflow_parent_run_id())
    artifacts = Path(parent.info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(tmp_path / "mlruns") and (artifacts / "command.txt").is_file()


def test_store_directory_is_created_on_demand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh clone has no mlruns/: SQLite cannot create directories, so the tracker does."""
    from autotune.observers.mlflow._session import _Session

    opened: list[str] = []

    class Client:  # creates the database file on first use, as MLflow does
        def __init__(self, tracking_uri: str) -> None:
            opened.append(tracking_uri)
            self.path = Path(tracking_uri.removeprefix("sqlite:///"))

        def search_experiments(self, **_: object) -> list[object]:
            self.path.touch()
            return []

    monkeypatch.setattr(mlflow, "MlflowClient", Client)
    uri = f"sqlite:///{tmp_path}/fresh/clone/mlruns/mlflow.db"
    _Session(uri)
    assert (tmp_path / "fresh" / "clone" / "mlruns" / "mlflow.db").is_file()
    # The store is built beside its place and linked in whole (FS02); the session then opens it there.
    assert opened[-1] == uri and len(opened) == 2 and sorted(os.listdir(tmp_path / "fresh" / "clone" / "mlruns")) == [
        "mlflow.db"]


# -- plots -----------------------------------------------------------------------------------------------


def test_plots_skip_what_a_small_study_cannot_show(tmp_path: Path) -> None:
    study = run_study(load_space(write_space(tmp_path)), fake_engine(),
                      options(tmp_path, storage="memory", trials=1, verify=False))
    written, skipped = save_study_plots(study, build_report(study), tmp_path / "plots")
    names = {p.name for p in written}
    assert "optimization_history.png" in names and "throughput_by_mode_and_k.png" in names
    assert "at least 2 complete trials" in skipped["param_importances"]
    assert skipped["winner_vs_baseline"] == "no verification yet"
    for path in written:
        assert path.read_bytes()[:4] == b"\x89PNG" and os.path.getsize(path) > 5000


def test_tracking_server_gets_short_retries_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that is down must not stall the study for MLflow's default ~4 minutes of retries per call."""
    from autotune.observers.mlflow._session import _Session

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "99")
    _Session("http://127.0.0.1:1")  # no request yet: the client connects lazily
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "99"


# -- several processes on one study: each run is created once, whoever logs it ---------------------------------


class _PeerCreatesTheParent:
    """Claims as a worker sees them when a peer created the parent run and finished its claim between this
    worker's look for the run and its try for the claim."""

    def __init__(self, peer: Any, ledger: Ledger, experiment_id: str) -> None:
        self.peer, self.ledger, self.experiment_id = peer, ledger, experiment_id
        self.finished = False

    def try_claim(self, job: str) -> None:
        if not self.finished:
            self.peer.open_parent(self.ledger, self.experiment_id, self.ledger.meta())  # the peer's whole claim
            self.finished = True
        return None

    def done(self, job: str) -> bool:
        return self.finished


def _parents(client: Any, ledger: Ledger) -> list[Any]:
    return client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string=f"tags.`autotune.study_uid` = '{ledger.study_uid()}' and "
                                            "tags.`autotune.kind` = 'study'")


def test_a_worker_that_loses_the_race_for_the_parent_run_joins_the_peers_run(tmp_path: Path) -> None:
    from autotune.observers.mlflow._session import _Session

    study = run_study(load_space(write_space(tmp_path)), fake_engine(), options(tmp_path, trials=2, verify=False))
    mine, peers = _Session(store(tmp_path)), _Session(store(tmp_path))
    exp = mine.experiment_id(experiment_name(study.meta().model, study.meta().engine))
    claims = _PeerCreatesTheParent(peers, study, exp)
    run_id, created = mine.open_parent(study, exp, study.meta(), claims, wait=lambda: None)
    assert claims.finished and not created
    parents = _parents(client_for(tmp_path), study)
    assert [p.info.run_id for p in parents] == [run_id] == [study.mlflow_parent_run_id()]


def test_a_trial_run_is_completed_not_duplicated_when_its_opening_half_failed_or_a_peer_opened_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.observers.mlflow._study_log import _StudyLog
    from autotune.observers.mlflow._session import _Session

    study = run_study(load_space(write_space(tmp_path)), fake_engine(), options(tmp_path, trials=3, verify=False))
    first, second = measured_trials(study)[:2]
    owner = _StudyLog(_Session(store(tmp_path)), study, study.meta())
    peer = _StudyLog(_Session(store(tmp_path)), study, study.meta())  # looked before any trial run

    # The owner's live logging opens the run, then the store fails while the params go in.
    real_log = _Session.log
    monkeypatch.setattr(_Session, "log", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("locked")))
    with pytest.raises(RuntimeError):
        owner.start_trial(first.number, first.config)
    monkeypatch.setattr(_Session, "log", real_log)
    owner.log_trial(first)  # the trial's end: completes that run
    # A peer whose view of the runs predates the owner's opens nothing new either.
    owner.start_trial(second.number, second.config)
    peer.log_trial(second)
    peer.log_trial(first)

    client = client_for(tmp_path)
    runs = child_runs(client, client.get_run(owner.parent_id), "trial")
    numbers = sorted(int(r.data.tags["autotune.trial_number"]) for r in runs)
    assert numbers == sorted([first.number, second.number])
    assert all(r.data.tags.get("autotune.logged") == "true" and r.data.params for r in runs)
