"""The benchmark, smoke-sized: every cell is there, picks are scored on the simulator's truth, outputs are written.

The headline numbers live in docs/benchmarks.md (``make bench``); these tests only check the machinery.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from autotune.bench._bench import (
    HELD_OUT_SEEDS,
    PROFILES,
    RANDOM2_RESTARTS,
    STRATEGIES,
    STRATEGY_FUNCS,
    BenchConfig,
    Task,
    check_status,
    check_targets,
    grid_points,
    ground_truth,
    load_profile_space,
    log_to_mlflow,
    make_engine,
    run_benchmark,
    run_one,
    summarize_runs,
)
from autotune.cli._main import raw_main
from autotune.engines.sim import SimEngine
from autotune.config.space import DEFAULT
from autotune.core.exit_status import ExitStatus

ROOT = Path(__file__).resolve().parents[2]


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
    assert {t["target"] for t in smoke["targets"]} >= {"flat autotune says faster at 30 <= 5%"}


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
            # "found" is the best configuration the strategy started: the pick is one of them, so never worse.
            assert 0.0 <= run["found"] <= run["regret"]


def test_found_is_the_best_configuration_a_strategy_started_whatever_it_picked():
    profile = PROFILES["gb10"]
    space = load_profile_space(profile, ROOT)
    engine = _CountingSim(**dict(profile.sim))
    pick = STRATEGY_FUNCS["random-2"](space, engine, 30, 5)
    values, best, _ = _truth_by_key("gb10")
    started = {k for k, _ in engine.starts}
    assert pick.started == started
    run = run_one(Task("gb10", "random-2", 30, 5), ROOT)
    assert run["found"] == pytest.approx(min((best - values.get(k, 0.0)) / best for k in started))
    assert run["found"] < run["regret"]  # this seed measured something better than its two-restart means picked
    row = summarize_runs([run, {**run, "seed": 6, "found": 0.01}])[0]
    assert row["mean_found"] == pytest.approx((run["found"] + 0.01) / 2)


def test_flat_has_no_configuration_more_than_one_percent_above_the_baseline(smoke):
    truth = smoke["truth"]["flat"]
    assert truth["best"] <= 1.01 * truth["baseline"]
    assert smoke["truth"]["gb10"]["baseline_over_best"] < 0.9  # gb10 does have something to find


def test_every_strategy_gets_the_same_budget_in_engine_starts(smoke):
    for run in smoke["runs"]:
        assert 0 < run["restarts_used"] <= run["budget"]
        assert 1 <= run["distinct"] <= run["restarts_used"]
        if run["strategy"] in ("grid", "naive-tpe"):
            assert run["restarts_used"] == run["budget"]
        if run["strategy"] == "random-2":  # stops when the next configuration's two starts would not fit
            assert run["restarts_used"] > run["budget"] - RANDOM2_RESTARTS


class _CountingSim(SimEngine):
    """A simulated engine that records every start it is asked for."""

    def __init__(self, **options):
        super().__init__(cache_dir=None, **options)
        self.starts: list[tuple[str, int]] = []

    def run_restart(self, config, workload, *, restart, seed):
        self.starts.append((config.key(), restart))
        return super().run_restart(config, workload, restart=restart, seed=seed)


@pytest.mark.parametrize("profile,budget,seed", [("gb10", 30, 0), ("h200", 21, 3), ("random", 20, 5)])
def test_random2_spends_two_starts_on_each_distinct_configuration_baseline_first(profile, budget, seed):
    space = load_profile_space(PROFILES[profile], ROOT)
    engine = _CountingSim(**dict(PROFILES[profile].sim), **({"landscape_seed": seed} if profile == "random" else {}))
    pick = STRATEGY_FUNCS["random-2"](space, engine, budget, seed)
    keys = list(dict.fromkeys(k for k, _ in engine.starts))
    assert keys[0] == space.baseline().key()
    per_config = {k: [r for kk, r in engine.starts if kk == k] for k in keys}
    failed = {k for k in keys if engine.true_throughput(space.config_from_params(
        next(p for p in space.all_params() if space.config_from_params(p).key() == k)), space.workload) is None}
    for key, restarts in per_config.items():
        # Two starts each, cold first start included; one when that first start crashed.
        assert restarts == ([0] if key in failed else list(range(RANDOM2_RESTARTS)))
    assert pick.restarts_used == len(engine.starts) <= budget
    assert pick.distinct == len(keys)
    assert pick.ci is None and pick.speedup_ci is None
    assert pick.config is not None and pick.config.key() in keys


def test_only_verified_strategies_report_an_interval(smoke):
    for run in smoke["runs"]:
        if run["strategy"] in ("autotune", "random"):
            assert run["covered"] is not None
            if run["ci"] is not None:
                low, high = run["ci"]
                assert run["covered"] == (low <= run["true"] <= high)
            # The speedup interval is scored only where the verdict shows one: a winner that is not the baseline.
            assert (run["speedup_covered"] is None) == (run["pick_key"] is None or run["pick_is_baseline"])
            if run["speedup_ci"] is not None and run["speedup_covered"] is not None:
                low, high = run["speedup_ci"]
                assert run["speedup_covered"] == (low <= run["true_speedup"] <= high)
        else:
            assert run["covered"] is None and run["ci"] is None
            assert run["speedup_covered"] is None and run["speedup_ci"] is None
    for row in smoke["summary"]:
        assert (row["coverage"] is None) == (row["strategy"] not in ("autotune", "random"))
        if row["strategy"] not in ("autotune", "random"):
            assert row["speedup_coverage"] is None


def test_naive_strategies_claim_a_win_only_for_a_non_baseline_pick(smoke):
    for run in smoke["runs"]:
        if run["strategy"] in ("random-2", "grid", "naive-tpe") and run["pick_is_baseline"]:
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


def _row(profile, strategy, budget, mean, median=0.0, p90=0.0, coverage=None, speedup=None, claims=0.0):
    return {"profile": profile, "strategy": strategy, "budget": budget, "mean_regret": mean, "median_regret": median,
            "p90_regret": p90, "coverage": coverage, "speedup_coverage": speedup, "claim_rate": claims}


def test_targets_are_issue_9s_done_when():
    rows = [_row("gb10", "autotune", 60, 0.012, 0.005, 0.04, 0.95, 0.85), _row("gb10", "grid", 60, 0.03),
            _row("gb10", "random-2", 60, 0.008),
            _row("h200", "autotune", 30, 0.01, 0.025, 0.05, 0.90, None), _row("h200", "naive-tpe", 30, 0.02),
            _row("flat", "autotune", 30, 0.0, claims=0.10)]
    checks = {c["target"]: c for c in check_targets(rows)}
    assert checks["gb10 autotune median regret at 60 <= 1%"]["ok"]
    assert checks["gb10 autotune p90 regret at 60 <= 5%"]["ok"]
    below = checks["gb10 autotune mean regret at 60 below every other strategy"]
    assert not below["ok"] and below["value"]["other"] == "random-2"
    assert checks["gb10 autotune throughput-interval coverage at 60 >= 90%"]["ok"]
    assert not checks["gb10 autotune speedup-interval coverage at 60 >= 90%"]["ok"]
    assert not checks["h200 autotune median regret at 30 <= 2%"]["ok"]
    assert checks["h200 autotune p90 regret at 30 <= 10%"]["ok"]
    assert checks["h200 autotune mean regret at 30 below every other strategy"]["ok"]
    assert "h200 autotune speedup-interval coverage at 30 >= 90%" not in checks  # no run had an interval to score
    assert not checks["flat autotune says faster at 30 <= 5%"]["ok"]


def test_a_tie_at_zero_mean_regret_passes_and_random_landscapes_get_only_relative_targets():
    rows = [_row(p, s, b, 0.0) for p in ("h200", "random") for s in ("autotune", "grid") for b in (20, 30)]
    checks = {c["target"]: c for c in check_targets(rows)}
    assert checks["h200 autotune mean regret at 30 below every other strategy"]["ok"]
    assert checks["random autotune mean regret at 30 below every other strategy"]["ok"]
    assert not any(t.startswith("random") and "regret at 30 <=" in t for t in checks)
    assert not any("mean regret at 20" in t for t in checks)  # the issue sets no relative target at 20 starts


def test_check_status_lists_every_missed_target_and_fails():
    result = {"targets": [{"target": "gb10 autotune p90 regret at 30 <= 10%", "value": 0.2, "ok": False},
                          {"target": "flat autotune says faster at 30 <= 5%", "value": 0.0, "ok": True}]}
    err = io.StringIO()
    assert check_status(result, True, err) == ExitStatus.ERROR == 1
    assert "MISS  gb10 autotune p90 regret at 30 <= 10%" in err.getvalue()
    assert "flat autotune" not in err.getvalue()
    assert check_status(result, False, io.StringIO()) == ExitStatus.SUCCESS
    assert check_status({"targets": result["targets"][1:]}, True, io.StringIO()) == ExitStatus.SUCCESS


def test_check_runs_the_held_out_seeds_and_exits_1_listing_the_missed_targets(tmp_path, capsys):
    # One held-out seed of a landscape drawn per seed: targets are missed or met as that seed falls, and the exit
    # status and the list must agree with the recorded checks either way.
    status = raw_main(["bench", "--check", "--seeds", "1", "--profiles", "random",
                       "--strategies", "autotune,naive-tpe", "--budgets", "30", "--jobs", "1", "--root", str(ROOT),
                       "--out", str(tmp_path), "--no-mlflow"])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["config"]["first_seed"] == HELD_OUT_SEEDS[0] == 100
    assert {r["seed"] for r in result["runs"]} == {100}
    missed = [c["target"] for c in result["targets"] if not c["ok"]]
    err = capsys.readouterr().err
    assert status == (ExitStatus.ERROR if missed else ExitStatus.SUCCESS)
    assert all(f"MISS  {t}" in err for t in missed)


def test_random_profile_scores_each_seed_on_its_own_landscape():
    profile = PROFILES["random"]
    space = load_profile_space(profile, ROOT)
    configs = {space.config_from_params(p).key(): space.config_from_params(p) for p in space.all_params()}
    truths = {seed: ground_truth(space, make_engine(profile, seed)) for seed in (1, 2)}
    assert truths[1].values != truths[2].values
    for seed, truth in truths.items():
        run = run_one(Task("random", "random-2", 20, seed), str(ROOT))
        assert run["regret"] == pytest.approx(truth.regret(configs[run["pick_key"]]))
        assert run["true_speedup"] == pytest.approx(run["true"] / truth.baseline)


def test_cli_writes_json_and_png_and_prints_the_table_last(tmp_path, capfd):
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
    # The pool's workers end quietly: the SIGTERM that closes the pool is not autotune's "interrupted" path.
    assert "Traceback" not in capfd.readouterr().err


def test_the_seed_pool_workers_do_not_take_the_clis_sigterm_path():
    import signal

    from autotune.bench._bench import worker_pool
    from autotune.engines.process import interrupt_on_sigterm

    with interrupt_on_sigterm():  # as under the CLI: SIGTERM raises in this process
        with worker_pool(2) as pool:
            handlers = pool.map(signal.getsignal, [signal.SIGTERM] * 2)
    assert handlers == [signal.SIG_DFL] * 2
    with interrupt_on_sigterm():
        with worker_pool(2) as pool:
            assert pool.map(signal.getsignal, [signal.SIGHUP] * 2) == [signal.SIG_DFL] * 2


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


def test_sampler_option_runs_the_autotune_strategy_with_that_sampler(tmp_path):
    pytest.importorskip("torch")  # Optuna's GPSampler needs it
    out = io.StringIO()
    status = raw_main(["bench", "--profiles", "h200", "--strategies", "autotune", "--budgets", "20", "--seeds", "1",
                       "--jobs", "1", "--sampler", "gp", "--root", str(ROOT), "--out", str(tmp_path), "--no-mlflow"],
                      out=out)
    assert status == ExitStatus.SUCCESS
    assert "autotune's sampler: gp" in out.getvalue()
    run = json.loads((tmp_path / "bench.json").read_text())["runs"][0]
    assert run["sampler"] == "gp" and run["restarts_used"] <= 20 and run["pick"] is not None
