"""Goodput as the objective and load levels: how a restart is scored, and studies on the simulator that use them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.records import decode, encode
from autotune.engines.sim import SimEngine
from autotune.decisions.racing import RacingPolicy
from autotune.core.records import LevelResult, RestartResult, Workload
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_study

from tests.conftest import store

# -- scoring one restart ---------------------------------------------------------------------------------


def _levels(*figures: tuple[int, float, dict[str, float]]) -> tuple[LevelResult, ...]:
    return tuple(LevelResult(c, (tok_s, tok_s), latency) for c, tok_s, latency in figures)


LEVELS = _levels((1, 100.0, {"tpot_p99_ms": 5.0, "ttft_p99_ms": 50.0, "goodput": 2.0, "requests": 8.0}),
                 (8, 600.0, {"tpot_p99_ms": 9.0, "ttft_p99_ms": 40.0, "goodput": 6.0, "requests": 8.0}),
                 (32, 1500.0, {"tpot_p99_ms": 20.0, "ttft_p99_ms": 30.0, "goodput": 1.0, "requests": 8.0}))


def _restart(levels: tuple[LevelResult, ...] = LEVELS, cold: bool = False) -> RestartResult:
    return RestartResult(status="ok", passes_tok_s=tuple(p for lv in levels for p in lv.passes_tok_s),
                         levels=levels, cold=cold)


def test_load_levels_combine_as_declared_and_latency_is_the_worst_level() -> None:
    low = Workload(concurrency=(1, 8, 32), aggregate="min").scored(_restart())
    assert low.value == 100.0
    mean = Workload(concurrency=(1, 8, 32), aggregate="mean", weights=(1.0, 2.0, 1.0)).scored(_restart())
    assert mean.value == pytest.approx((100 + 1200 + 1500) / 4)
    # An SLO must hold at every level: the restart's percentiles are its worst level's; requests add up.
    assert mean.latency["tpot_p99_ms"] == 20.0 and mean.latency["ttft_p99_ms"] == 50.0
    assert mean.latency["requests"] == 24.0
    assert mean.latency["goodput"] == pytest.approx((2 + 12 + 1) / 4), "rates combine as the objective does"
    again = decode(RestartResult, json.loads(json.dumps(encode(mean))))
    assert again == mean and again.value == mean.value, "levels and score survive the study's storage"


def test_goodput_scores_requests_meeting_the_limits() -> None:
    wl = Workload(concurrency=(1, 8, 32), aggregate="min", objective="goodput", slo=(("tpot_p99_ms", 10.0),))
    assert wl.unit == "req/s" and wl.scored(_restart()).value == 1.0
    single = Workload(objective="goodput", slo=(("tpot_p99_ms", 10.0),))
    one = RestartResult(status="ok", passes_tok_s=(500.0,), latency={"goodput": 3.5})
    assert single.scored(one).value == 3.5 and single.scored(one).ok
    zero = single.scored(RestartResult(status="ok", passes_tok_s=(500.0,), latency={"goodput": 0.0}))
    assert not zero.ok and zero.error == "goodput 0 req/s: no request met every slo limit"
    cold = single.scored(RestartResult(status="ok", passes_tok_s=(500.0,), latency={"goodput": 0.0}, cold=True))
    assert cold.ok and cold.cold, "a cold first start is never counted: it must not fail the configuration"
    blind = single.scored(RestartResult(status="ok", passes_tok_s=(500.0,)))
    assert not blind.ok and "no goodput" in (blind.error or "")
    assert Workload().scored(one).value == 500.0, "throughput: mean tok/s, as before"


def test_sim_measures_every_level_in_one_start() -> None:
    engine = SimEngine(profile="h200", model_profile="dense", noise=0.0)
    sp = parse_space(_space(concurrency=[1, 8, 32], aggregate="min"))
    config = next(sp.config_from_params(p) for p in sp.all_params() if p["max_num_seqs"] == 64)
    restart = engine.run_restart(config, sp.workload, restart=0, seed=1)
    assert [lv.concurrency for lv in restart.levels] == [1, 8, 32]
    assert restart.passes_tok_s == tuple(p for lv in restart.levels for p in lv.passes_tok_s)
    tok_s = [lv.tok_s for lv in restart.levels]
    assert tok_s == sorted(tok_s) and tok_s[2] > 5 * tok_s[0], "more requests in flight, more tokens per second"
    single = engine.run_restart(config, sp.workload.at(1), restart=0, seed=1)
    # One start-up for three levels: far less than three starts.
    assert restart.wall_s < single.wall_s + 2 * (single.wall_s - single.startup_s) + 1.0
    truth = engine.true_value(config, sp.workload)
    assert truth == pytest.approx(engine.true_throughput(config, sp.workload.at(1)))


# -- studies on the simulator ----------------------------------------------------------------------------


def _space(objective: str = "throughput", slo: dict[str, float] | None = None, **workload: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "levels",
        "engine": {"name": "sim", "sim": {"profile": "h200", "model_profile": "dense"}},
        "engine_args": {"model": "sim/dense-1b", "max_model_len": 4096},
        "workload": {"dataset": "synthetic", "repetitive_prompts": False, "num_prompts": 64, "input_len": 256,
                     "output_len": 256, "concurrency": 64, "timed_passes": 2, **workload},
        "objective": objective,
        "search": {"cudagraph_mode": ["FULL_AND_PIECEWISE"], "engine_args": {"max_num_seqs": [8, 16, 32, 64]}},
    }
    if slo:
        raw["slo"] = slo
    return raw


def _options(tmp_path: Path, **kw: Any) -> StudyOptions:
    base = dict(study_name="t", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                trials=6, policy=RacingPolicy(min_restarts=2, racing=False), top_k=2, verify_restarts=3, seed=1)
    base.update(kw)
    return StudyOptions(**base)


def test_a_goodput_study_maximises_goodput_not_throughput(tmp_path: Path) -> None:
    # On the simulated H200 max_num_seqs=64 has the most tok/s, but its every token takes longer than 2 ms:
    # no request meets the limit. 32 serves the most requests within it.
    space = parse_space(_space("goodput", {"tpot_p99_ms": 2.0}))
    engine = SimEngine(profile="h200", model_profile="dense")
    configs = {p["max_num_seqs"]: space.config_from_params(p) for p in space.all_params()}
    assert max(configs, key=lambda n: engine.true_throughput(configs[n], space.workload)) == 64
    assert max(configs, key=lambda n: engine.true_value(configs[n], space.workload)) == 32
    # Every configuration measured (the sampler's path is not what this test is about).
    opts = _options(tmp_path, enqueue=tuple(space.all_params()), top_k=3)
    report = build_report(run_study(space, engine, opts), engine=engine, space=space)
    assert report.winner.config.engine_args["max_num_seqs"] == 32
    assert report.unit == "req/s" and report.winner.unit == "req/s"
    true_goodput = engine.true_value(configs[32], space.workload)
    assert report.winner.ci_low <= true_goodput * 1.05 and report.winner.ci_high >= true_goodput * 0.95
    counted = [r for r in report.winner.restarts if r.ok and not r.cold]
    assert [r.value for r in counted] == [r.latency["goodput"] for r in counted], "the value is the goodput"
    text = render_report(report)
    assert "goodput (fresh interleaved restarts" in text and " req/s (n=" in text and "tok/s (n=" not in text
    assert "Objective: goodput, requests/s whose own tpot <= 2 ms" in text
    assert "MISSES" not in text, "under goodput the limits judge requests, not configurations"
    assert any("goodput 0 req/s" in f.reason for f in report.failures), "64: no request met the limit"
    assert report.to_json()["unit"] == "req/s"
    from autotune.cli.export import header_lines

    assert header_lines(report)[1].startswith("goodput: ") and "req/s (n=" in header_lines(report)[1]
    assert "meeting tpot_p99_ms <= 2 on" in header_lines(report)[1]


def test_a_load_level_study_reports_the_best_configuration_per_level(tmp_path: Path) -> None:
    space = parse_space(_space(concurrency=[4, 64], aggregate="mean", weights=[3, 1]))
    assert space.engine_args.get("max_num_seqs") is None and space.workload.max_concurrency == 64
    engine = SimEngine(profile="h200", model_profile="dense")
    report = build_report(run_study(space, engine, _options(tmp_path, enqueue=tuple(space.all_params()), top_k=3)))
    assert [b.concurrency for b in report.levels] == [4, 64] and all(b.unit == "tok/s" for b in report.levels)
    by_level = {b.concurrency: b for b in report.levels}
    # At 64 requests in flight a limit of 8 or 16 sequences holds the engine back; at 4 it hardly matters.
    assert by_level[64].label.endswith("max_num_seqs=64") and by_level[64].value > 4 * by_level[4].value
    for b in report.levels:
        means = [sum(lv.tok_s for r in e.restarts if r.ok and not r.cold for lv in r.levels
                     if lv.concurrency == b.concurrency) / e.n for e in report.verification.entries]
        assert b.value == pytest.approx(max(means)), "the best mean at that level among the verified"
    assert [d["concurrency"] for d in report.to_json()["levels"]] == [4, 64]
    text = render_report(report)
    assert "Best configuration per load level" in text and "concurrency 64" in text
    assert "load levels combined by mean (weights 3, 1) over concurrency 4, 64" in text
    # The winner's value is the declared weighted mean of its levels, restart by restart.
    for r in report.winner.restarts:
        if r.ok and not r.cold:
            assert r.value == pytest.approx((3 * r.levels[0].tok_s + r.levels[1].tok_s) / 4)


def test_per_level_values_go_to_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.report import plots
    from autotune.observers.mlflow import MlflowTracker

    mlflow = pytest.importorskip("mlflow")
    # Drawing the PNGs is half this test's time and none of its subject (tests/observers/test_tracking.py covers them).
    monkeypatch.setattr(plots, "save_study_plots", lambda ledger, report, out: ([], {}))
    space = parse_space(_space(concurrency=[4, 64], aggregate="min"))
    tracker = MlflowTracker(tracking_uri=store(tmp_path), stream=io.StringIO())
    opts = _options(tmp_path, trials=2, top_k=1, verify_restarts=2)
    engine = SimEngine(profile="h200", model_profile="dense")
    ledger = run_study(space, engine, opts, [tracker])
    tracker.on_report(build_report(ledger, engine=engine, space=space))
    best = {b.concurrency: b for b in build_report(ledger).levels}
    client = mlflow.MlflowClient(store(tmp_path))
    parent = client.get_run(ledger.mlflow_parent_run_id())
    assert parent.data.metrics["c64.best_tok_s"] == pytest.approx(best[64].value, rel=1e-5)
    assert parent.data.tags["c64.best"] == best[64].label
    runs = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    trial = next(r for r in runs if r.data.tags.get("autotune.kind") == "trial")
    assert {"c4.tok_s", "c64.tok_s", "c64.tpot_p99_ms"} <= set(trial.data.metrics)
    assert trial.data.metrics["c4.tok_s"] < trial.data.metrics["c64.tok_s"]
    history = client.get_metric_history(trial.info.run_id, "c64.restart_tok_s")
    assert len(history) == int(trial.data.metrics["n_restarts"]) == 2
