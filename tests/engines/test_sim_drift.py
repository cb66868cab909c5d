"""The drifting machine (issue 41): the model's statistics, its fit, the simulator's option, the replay scenario."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from autotune.bench.drift import Observation, Series, fit_drift, fit_preset, issue41_series, load_series
from autotune.core.records import EngineConfig, Workload
from autotune.engines import EngineError
from autotune.engines.drift import PRESETS, DriftNoise, DriftParams, drift_scenario, window_g
from autotune.engines.sim import SimEngine

PARAMS = DriftParams(level_sd=0.10, level_tau_s=120.0, restart_sd=0.03, pass_sd=0.10, pass_tau_s=2.9)


def _lag1(x: np.ndarray) -> float:
    return float(np.corrcoef(x[:-1], x[1:])[0, 1])


def test_a_long_draw_has_the_stated_sd_and_correlation_of_restarts_a_minute_apart() -> None:
    noise = DriftNoise(PARAMS, 1)
    n, timed = 6000, 10.0
    logs = np.log([noise.restart(1000.0, 60.0 * i, timed, 2).value for i in range(n)])
    sd = math.sqrt(PARAMS.restart_var(timed))
    rho = PARAMS.correlation(60.0, timed)
    assert rho > 0.3  # the stated machine correlates successive restarts
    assert abs(logs.std() / sd - 1.0) < 0.06
    assert abs(_lag1(logs) - rho) < 0.05


def test_the_level_path_has_its_sd_and_correlation_time() -> None:
    noise = DriftNoise(PARAMS, 2)
    tau = PARAMS.level_tau_s
    lv = noise.levels(np.arange(0.0, 4000 * tau, tau / 2.0))
    assert abs(lv.std() / PARAMS.level_sd - 1.0) < 0.05
    assert abs(float(np.corrcoef(lv[:-2], lv[2:])[0, 1]) - math.exp(-1.0)) < 0.04  # lag tau


def test_passes_inside_a_restart_vary_by_the_stated_pass_sd() -> None:
    noise = DriftNoise(PARAMS, 3)
    diffs = []
    for i in range(4000):
        p = noise.restart(1000.0, 600.0 * i, 10.0, 2).passes
        diffs.append(math.log(p[0]) - math.log(p[1]))
    x = 5.0 / PARAMS.pass_tau_s
    rho = (1 - math.exp(-x)) ** 2 / (x * x * window_g(x))  # adjacent windows of an OU process
    expected = math.sqrt(2.0 * PARAMS.pass_sd ** 2 * (1.0 - rho))
    assert abs(np.std(diffs) / expected - 1.0) < 0.05


def test_the_level_is_a_function_of_time_not_of_the_order_asked() -> None:
    a, b = DriftNoise(PARAMS, 9), DriftNoise(PARAMS, 9)
    late, early = a.level(90_000.0), a.level(10.0)
    assert b.level(10.0) == early and b.level(90_000.0) == late
    b.restart(1000.0, 50.0, 10.0, 3)  # drawing restarts does not move the machine
    assert b.level(500.0) == a.level(500.0)
    with pytest.raises(ValueError, match="seconds >= 0"):
        a.level(-1.0)


def _sessions(params: DriftParams, sessions: int, seed: int) -> list[Series]:
    """Sessions laid out like issue 41's verification: 8 rounds of two configurations, 44 s apart, 3 passes."""
    out = []
    for s in range(sessions):
        noise = DriftNoise(params, [seed, s])
        obs = []
        for i in range(16):
            config = "a" if i % 2 == 0 else "b"
            d = noise.restart(1000.0 if config == "a" else 1300.0, 44.0 * i, 15.0, 3)
            obs.append(Observation(config, 44.0 * i + 7.5, d.value, ((d.passes, (5.0,) * 3),), timed_s=15.0))
        out.append(Series(f"s{s}", obs))
    return out


def test_the_fit_recovers_the_parameters_it_was_drawn_from() -> None:
    truth = DriftParams(level_sd=0.10, level_tau_s=300.0, restart_sd=0.02, pass_sd=0.08, pass_tau_s=2.9)
    fit = fit_drift(_sessions(truth, 40, 5), bootstrap=0, pass_tau_s=2.9).params
    assert abs(fit.pass_sd / truth.pass_sd - 1.0) < 0.1
    assert abs(fit.level_sd / truth.level_sd - 1.0) < 0.3
    assert 150.0 < fit.level_tau_s < 600.0
    assert fit.restart_sd < 0.06
    # And a machine without drift is not fitted as one.
    flat = DriftParams(level_sd=0.001, level_tau_s=300.0, restart_sd=0.08, pass_sd=0.08, pass_tau_s=2.9)
    fit = fit_drift(_sessions(flat, 40, 6), bootstrap=0, pass_tau_s=2.9).params
    assert fit.correlation(44.0, 15.0) < 0.15
    assert abs(fit.restart_sd / 0.08 - 1.0) < 0.25


def test_issue_41s_restarts_are_data_in_time_order() -> None:
    s = issue41_series()
    assert [round(o.value) for o in s.obs[:4]] == [3352, 2465, 3641, 2983]
    assert [o.config for o in s.obs[:2]] == ["winner", "baseline"]
    assert all(b.t_s > a.t_s for a, b in zip(s.obs, s.obs[1:]))


def test_the_recorded_studies_load_as_sessions_of_repeated_configurations() -> None:
    series = load_series()
    assert series[0].name.startswith("issue41")
    for s in series[1:]:
        assert all(len(idx) >= 2 for idx in s.groups().values())
        assert all(b.t_s >= a.t_s for a, b in zip(s.obs, s.obs[1:]))
    assert sum(len(s.obs) for s in series) > 40


# -- the simulator ---------------------------------------------------------------------------------------


def _sim_logs(**options: object) -> np.ndarray:
    engine = SimEngine(cache_dir=None, profile="h200", **options)
    config = EngineConfig()
    engine.run_restart(config, Workload(), restart=0, seed=0)  # the cold start
    return np.log([engine.run_restart(config, Workload(), restart=i, seed=i).value for i in range(1, 300)])


def test_the_sim_with_drift_correlates_successive_restarts_and_without_does_not() -> None:
    on, off = _sim_logs(drift="h100"), _sim_logs()
    assert _lag1(on) > 0.2
    assert abs(_lag1(off)) < 0.15
    assert on.std() > 2 * off.std()  # the preset's noise replaces the profile's 3.5%


def test_the_sim_clock_is_its_restarts_wall_time_and_one_seed_is_one_machine() -> None:
    a = SimEngine(cache_dir=None, drift="h100", drift_seed=3)
    b = SimEngine(cache_dir=None, drift="h100", drift_seed=3)
    c = SimEngine(cache_dir=None, drift="h100", drift_seed=4)
    results = [e.run_restart(EngineConfig(), Workload(), restart=0, seed=0) for e in (a, b, c)]
    assert a.clock_s == pytest.approx(results[0].wall_s)
    assert results[0].value == results[1].value != results[2].value
    assert a.describe().extra["drift"] == "h100"


def test_a_slow_machine_starts_slowly_in_the_sim() -> None:
    engine = SimEngine(cache_dir=None, profile="h200", drift="h100")
    config = EngineConfig()
    engine.run_restart(config, Workload(), restart=0, seed=0)
    rows = [engine.run_restart(config, Workload(), restart=i, seed=i) for i in range(1, 300)]
    corr = np.corrcoef(np.log([r.startup_s for r in rows]), np.log([r.value for r in rows]))[0, 1]
    assert corr < -0.2


def test_an_unknown_drift_is_one_line_naming_the_option() -> None:
    with pytest.raises(EngineError, match=r"engine\.sim\.drift must be one of off, h100"):
        SimEngine(cache_dir=None, drift="h300")


# -- the replay scenario ---------------------------------------------------------------------------------


def test_the_scenario_draws_a_study_in_time_order_with_rounds_adjacent() -> None:
    paired, unpaired = [], []
    for seed in range(300):
        sc = drift_scenario(1.13, seed=seed)
        rows = sc.study([("baseline", 150.0), ("other", 120.0), ("challenger", 150.0)], rounds=4)
        assert [r.phase for r in rows[:2]] == ["search", "search"]
        assert all(b.t_s > a.t_s for a, b in zip(rows, rows[1:]))
        verify = [r for r in rows if r.phase == "verify"]
        by_round: dict[int, dict[str, float]] = {}
        for r in verify:
            by_round.setdefault(r.round, {})[r.config] = math.log(r.value)
        paired += [d["challenger"] - d["baseline"] for d in by_round.values()]
        unpaired.append(by_round[0]["challenger"] - by_round[3]["baseline"])
    assert abs(np.mean(paired) - math.log(1.13)) < 0.02
    assert np.var(paired) < 0.8 * np.var(unpaired)  # both sides of a round share the machine's level


def test_the_scenario_refuses_what_it_does_not_know() -> None:
    sc = drift_scenario(1.13, seed=0)
    assert sc.effect == pytest.approx(1.13)
    first = sc.run("baseline", 90.0)
    assert sc.clock_s == 90.0 and first.value == drift_scenario(1.13, seed=0).draw("baseline", 0.0).value
    with pytest.raises(KeyError, match="no configuration"):
        sc.draw("nope", 0.0)
    with pytest.raises(ValueError, match="effect"):
        drift_scenario(0.0)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_is_the_fit_of_the_sessions_it_names(name: str) -> None:
    fitted = fit_preset(name)[0].params
    preset = PRESETS[name]
    for field in ("level_sd", "level_tau_s", "pass_sd", "pass_tau_s", "init_coupling", "init_sd"):
        assert getattr(preset, field) == pytest.approx(getattr(fitted, field), rel=0.01), field
    assert preset.restart_sd == pytest.approx(fitted.restart_sd, abs=0.001)


def test_the_bench_runs_a_landscape_on_the_drifting_machine_only_when_asked() -> None:
    from autotune.bench._bench import PROFILES, Task, make_engine, run_one

    root = str(Path(__file__).resolve().parents[2])
    off, on = (run_one(Task("h200", "random-2", 12, 3, drift=d), root) for d in ("off", "h100"))
    assert off["drift"] == "off" and on["drift"] == "h100"
    assert off["measured"] != on["measured"]
    assert make_engine(PROFILES["h200"], 3).drift is None
    engine = make_engine(PROFILES["h200"], 3, "h100")
    assert engine.settings.drift_seed == 3 and engine.drift is not None
