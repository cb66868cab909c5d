"""The benchmark, smoke-sized: every cell is there, picks are scored on the simulator's truth, outputs are written.

The headline numbers live in docs/benchmarks.md (``make bench``); these tests only check the machinery.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from autotune.bench import (
    PROFILES,
    STRATEGIES,
    BenchConfig,
    Task,
    check_targets,
    grid_points,
    ground_truth,
    load_profile_space,
    log_to_mlflow,
    make_engine,
    run_benchmark,
    run_one,
)
from autotune.cli import raw_main
from autotune.space import DEFAULT
from autotune.status import ExitStatus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke() -> dict:
    config = BenchConfig(profiles=("gb10", "flat"), strategies=STRATEGIES, budgets=(30,), seeds=2, jobs=1,
                         root=str(ROOT))
    return run_benchmark(config)


def _truth_by_key(profile: str) -> tuple[dict[str, float], float, float]:
    space = load_profile_space(PROFILES[profile], ROOT)
    engine = make_engine(PROFILES[profile])
    values = {}
    for params in space.all_params():
        config = space.config_from_params(params)
        value = engine.true_throughput(config, space.workload)
        if value is not None:
            values[config.key()] = value
    return values, max(values.values()), engine.true_throughput(space.baseline(), space.workload)


def test_every_profile_strategy_budget_and_seed_is_run_and_summarised(smoke):
    assert len(smoke["runs"]) == 2 * len(STRATEGIES) * 1 * 2
    cells = {(r["profile"], r["strategy"], r["budget"]) for r in smoke["summary"]}
    assert cells == {(p, s, 30) for p in ("gb10", "flat") for s in STRATEGIES}
    assert all(r["n"] == 2 for r in smoke["summary"])
    assert {t["target"] for t in smoke["targets"]} >= {"flat autotune false-win rate at 30 <= 5%"}


def test_picks_are_scored_on_the_simulators_noiseless_truth(smoke):
    for profile in ("gb10", "flat"):
        values, best, baseline = _truth_by_key(profile)
        assert smoke["truth"][profile]["best"] == pytest.approx(best)
        assert smoke["truth"][profile]["baseline"] == pytest.approx(baseline)
        for run in (r for r in smoke["runs"] if r["profile"] == profile):
            assert run["pick_key"] in values, "every strategy recommends a configuration that runs"
            assert run["true"] == pytest.approx(values[run["pick_key"]])
            assert run["regret"] == pytest.approx((best - values[run["pick_key"]]) / best)
            assert 0.0 <= run["regret"] < 1.0
            assert run["true_speedup"] == pytest.approx(values[run["pick_key"]] / baseline)


def test_flat_has_no_configuration_more_than_one_percent_above_the_baseline(smoke):
    truth = smoke["truth"]["flat"]
    assert truth["best"] <= 1.01 * truth["baseline"]
    assert smoke["truth"]["gb10"]["baseline_over_best"] < 0.9  # gb10 does have something to find


def test_every_strategy_gets_the_same_budget_in_engine_starts(smoke):
    for run in smoke["runs"]:
        assert 0 < run["restarts_used"] <= run["budget"]
        if run["strategy"] in ("grid", "naive-tpe"):
            assert run["restarts_used"] == run["budget"]


def test_only_verified_strategies_report_an_interval(smoke):
    for run in smoke["runs"]:
        if run["strategy"] in ("autotune", "random"):
            assert run["covered"] is not None
            if run["ci"] is not None:
                low, high = run["ci"]
                assert run["covered"] == (low <= run["true"] <= high)
        else:
            assert run["covered"] is None and run["ci"] is None
    for row in smoke["summary"]:
        assert (row["coverage"] is None) == (row["strategy"] not in ("autotune", "random"))


def test_naive_strategies_claim_a_win_only_for_a_non_baseline_pick(smoke):
    for run in smoke["runs"]:
        if run["strategy"] in ("grid", "naive-tpe") and run["pick_is_baseline"]:
            assert not run["claims_faster"]


def test_ground_truth_best_is_the_maximum_over_the_space():
    profile = PROFILES["h200"]
    space = load_profile_space(profile, ROOT)
    engine = make_engine(profile)
    truth = ground_truth(space, engine)
    assert truth.n_configs == len(space.all_params())
    assert truth.best == pytest.approx(max(truth.values.values()))
    assert truth.regret(space.baseline()) == pytest.approx(1.0 - truth.baseline / truth.best)
    assert truth.regret(None) == 1.0


def test_the_grid_is_coarse_every_mode_default_sizes_every_other_k():
    space = load_profile_space(PROFILES["gb10"], ROOT)
    points = grid_points(space)
    assert {p.get("capture_sizes", DEFAULT) for p in points} == {DEFAULT}
    assert {p["num_speculative_tokens"] for p in points} == {0, 2, 4, 6}
    assert {p["cudagraph_mode"] for p in points} == set(space.modes)
    assert space.baseline_params()[0] in points


def test_one_run_is_deterministic_for_a_seed():
    task = Task("flat", "naive-tpe", 30, 7)
    first, second = run_one(task, str(ROOT)), run_one(task, str(ROOT))
    first.pop("wall_s"), second.pop("wall_s")
    assert first == second


def test_targets_compare_autotune_with_the_best_other_strategy():
    rows = [{"profile": "gb10", "strategy": s, "budget": 60, "median_regret": r, "coverage": c, "claim_rate": 0.0}
            for s, r, c in (("autotune", 0.01, 0.95), ("grid", 0.02, None), ("naive-tpe", 0.005, None))]
    checks = {c["target"]: c for c in check_targets(rows)}
    assert checks["gb10 autotune median regret at 60 <= 2%"]["ok"]
    below = checks["gb10 autotune median regret at 60 below every other strategy"]
    assert not below["ok"] and below["value"]["other"] == "naive-tpe"
    assert checks["gb10 autotune winner-CI coverage at 60 >= 90%"]["ok"]


def test_cli_writes_json_and_png_and_prints_the_table_last(tmp_path):
    out = io.StringIO()
    status = raw_main(["bench", "--profiles", "flat", "--strategies", "grid,naive-tpe", "--budgets", "30",
                       "--seeds", "2", "--jobs", "2", "--root", str(ROOT), "--out", str(tmp_path), "--no-mlflow"],
                      out=out)
    assert status == ExitStatus.SUCCESS
    text = out.getvalue().rstrip().splitlines()
    table_start = next(i for i, line in enumerate(text) if line.startswith("profile"))
    assert all(line.startswith(("flat", "-", "*")) or not line for line in text[table_start + 1:])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert {"config", "truth", "runs", "summary", "targets", "wall_s"} <= set(result)
    assert (tmp_path / "regret.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_rejects_unknown_profiles_and_bad_budgets(capsys):
    assert raw_main(["bench", "--profiles", "tpu"]) == ExitStatus.BAD_INPUT
    assert "choose from" in capsys.readouterr().err
    assert raw_main(["bench", "--budgets", "thirty"]) == ExitStatus.BAD_INPUT


def test_mlflow_run_holds_every_summary_number_and_the_artifacts(smoke, tmp_path):
    import mlflow

    json_path, png_path = tmp_path / "bench.json", tmp_path / "regret.png"
    json_path.write_text(json.dumps(smoke, default=str))
    png_path.write_bytes(b"\x89PNG\r\n\x1a\n")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = log_to_mlflow(smoke, [json_path, png_path], uri)
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert client.get_experiment(run.info.experiment_id).name == "autotune/bench"
    assert run.info.status == "FINISHED"
    row = next(r for r in smoke["summary"] if r["profile"] == "gb10" and r["strategy"] == "autotune")
    assert math.isclose(run.data.metrics["gb10/autotune/b30/median_regret"], row["median_regret"], rel_tol=1e-9)
    assert {a.path for a in client.list_artifacts(run_id)} == {"bench.json", "regret.png"}
