"""The warm-up rule (``autotune.stats.warmup``) on synthetic series, and pass sizing by time."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from autotune.records import decode, encode
from autotune.stats import warmup


def _stop_after(series: list[float], minimum: int = 1, maximum: int = 20) -> int:
    """Warm-up passes the live rule runs on ``series`` (asked after every pass, as the engines ask it)."""
    for n in range(len(series) + 1):
        if warmup.warmup_end(series[:n], minimum, maximum):
            return n
    raise AssertionError("the rule never stopped within the series")


def _noise(level: float, spread: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_the_measured_h200_ramp_ends_after_the_ramp() -> None:
    # A speculative configuration's first passes on the H200 (issue 21), then passes within +-10% of steady.
    ramp = [720.0, 1586.0, 2089.0, 3826.0]
    series = ramp + _noise(3800.0, 0.10, 16, seed=1)
    stop = _stop_after(series)
    assert stop > len(ramp)
    assert stop <= len(ramp) + 4


def test_a_longer_ramp_keeps_warming_up_past_the_minimum() -> None:
    ramp = [500.0, 900.0, 1400.0, 1900.0, 2500.0, 3100.0, 3700.0]
    series = ramp + _noise(3800.0, 0.05, 12, seed=2)
    assert _stop_after(series) >= len(ramp)


def test_the_issue_baseline_ends_at_the_minimum_and_the_fixed_tolerance_would_not() -> None:
    baseline = [3517.0, 3401.0, 3773.0, 2831.0]  # a baseline's passes on the H200: no ramp, noise
    assert _stop_after(baseline + [3500.0] * 4) == warmup.DROP_FIRST + warmup.MIN_TAIL
    assert all(abs(a - b) / max(a, b) > 0.03 for a, b in zip(baseline, baseline[1:]))


def test_stationary_noise_of_15_percent_mostly_ends_at_the_minimum() -> None:
    least = warmup.DROP_FIRST + warmup.MIN_TAIL
    # A trend test on three passes takes noise for a rise about one time in seven (TREND_T): most, not all.
    stops = [_stop_after(_noise(3500.0, 0.15, 20, seed=s)) for s in range(200)]
    assert sum(s == least for s in stops) / len(stops) > 0.7
    assert max(stops) < 20


def test_the_cap_holds_on_a_series_that_never_settles() -> None:
    rising = [100.0 * 1.3**i for i in range(30)]
    assert not warmup.is_warm(rising[:10])
    assert _stop_after(rising, minimum=1, maximum=6) == 6


def test_the_floor_holds_and_zero_runs_no_warm_up() -> None:
    flat = [1000.0] * 20
    assert _stop_after(flat, minimum=7, maximum=9) == 7
    assert warmup.warmup_end([], 0, 4)


def test_a_falling_tail_is_not_warmed_up_further() -> None:
    # Warming makes a process faster; a drop is noise or throttling, which more warm-up does not fix.
    assert warmup.is_warm([500.0, 4000.0, 3600.0, 3200.0])


def test_mser_truncates_a_transient_and_keeps_a_stationary_series() -> None:
    assert warmup.mser_truncation([100.0, 200.0, 1000.0, 1010.0, 990.0, 1000.0]) == 2
    assert warmup.mser_truncation([1000.0, 1010.0, 990.0, 1000.0, 1005.0]) == 0
    assert warmup.mser_truncation([1.0, 2.0]) is None


def test_mser_5_batches_a_long_series() -> None:
    series = [100.0] * 5 + [1000.0 + (i % 3) for i in range(30)]
    assert warmup.mser_truncation(series, batch=warmup.MSER_BATCH) == 5
    assert warmup.is_warm([50.0, *series])


def test_a_non_positive_pass_is_never_warm() -> None:
    assert not warmup.is_warm([100.0, 1000.0, 0.0, 1000.0, 1000.0])


@pytest.mark.parametrize(("target", "round_s", "rounds"),
                         [(5.0, 1.0, 5), (5.0, 0.8, 6), (5.0, 30.0, 1), (0.0, 1.0, 1), (5.0, None, 1),
                          (5.0, 1e-9, warmup.MAX_ROUNDS)])
def test_timed_passes_are_sized_in_whole_rounds(target: float, round_s: float | None, rounds: int) -> None:
    assert warmup.timed_rounds(target, round_s) == rounds


def test_pass_seconds_is_settable_validated_and_left_out_of_the_identity_at_its_default(tmp_path) -> None:
    from autotune.config.space import SpaceError, load_space
    from autotune.core.records import Workload

    assert "pass_seconds" not in encode(Workload())  # a stored study's workload digest stays what it was
    assert decode(Workload, encode(Workload(pass_seconds=2.5))).pass_seconds == 2.5
    base = "engine_args: {model: m}\nsearch: {cudagraph_mode: [NONE, FULL]}\n"
    good = tmp_path / "good.yaml"
    good.write_text(base + "workload: {pass_seconds: 2}\n")
    assert load_space(good).workload.pass_seconds == 2.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "workload: {pass_seconds: -1}\n")
    with pytest.raises(SpaceError) as info:
        load_space(bad)
    message = str(info.value)
    assert "\n" not in message and "workload.pass_seconds" in message


def test_the_report_totals_phases_over_every_restart_and_counts_those_without() -> None:
    from autotune.core import facts as F
    from autotune.core.records import RestartResult
    from autotune.report.phases import phase_totals, render_phases

    a = RestartResult("ok", passes_tok_s=(1.0,), facts={F.PHASE_COMPILE_S: 60.0, F.PHASE_TIMED_S: 15.0,
                                                        F.WARMUP_PASSES: 4})
    b = RestartResult("ok", passes_tok_s=(1.0,), facts={F.PHASE_COMPILE_S: 6.0, F.PHASE_TIMED_S: 15.0,
                                                        F.PHASE_WARMUP_S: 3.0, F.WARMUP_PASSES: 6})
    old = RestartResult("ok", passes_tok_s=(1.0,))
    totals = phase_totals([a, b, old])
    assert totals is not None
    assert dict(totals.seconds) == {F.PHASE_COMPILE_S: 66.0, F.PHASE_WARMUP_S: 3.0, F.PHASE_TIMED_S: 30.0}
    assert (totals.restarts, totals.without, totals.warmup_passes) == (2, 1, 10)
    assert encode(totals)["total_s"] == 99.0
    text = " ".join(render_phases(totals))
    assert "compile 1.1 min (67%)" in text and "1 restarts did not say" in text and "5.0 passes" in text
    assert phase_totals([old]) is None and render_phases(None) == []



def test_the_report_names_the_start_up_phases_and_reads_records_from_before_them() -> None:
    # A restart recorded before set-up, profiling and kernel warm-up were named keeps those seconds in "other
    # start-up"; a new one names them. Both total into one line, in the order a restart runs them.
    from autotune.core import facts as F
    from autotune.core.records import RestartResult
    from autotune.report.phases import phase_totals, render_phases

    before = decode(RestartResult, encode(RestartResult(
        "ok", passes_tok_s=(1.0,), facts={F.PHASE_COMPILE_S: 18.0, F.PHASE_OTHER_STARTUP_S: 132.0})))
    named = RestartResult("ok", passes_tok_s=(1.0,), facts={
        F.PHASE_SETUP_S: 24.0, F.PHASE_COMPILE_S: 18.0, F.PHASE_PROFILE_S: 3.0, F.PHASE_CAPTURE_S: 1.0,
        F.PHASE_KERNEL_WARMUP_S: 102.0, F.PHASE_OTHER_STARTUP_S: 2.0})
    totals = phase_totals([before, named])
    assert totals is not None and totals.total_s == 300.0
    assert list(totals.seconds) == [F.PHASE_SETUP_S, F.PHASE_COMPILE_S, F.PHASE_PROFILE_S, F.PHASE_CAPTURE_S,
                                    F.PHASE_KERNEL_WARMUP_S, F.PHASE_OTHER_STARTUP_S]
    line = render_phases(totals)[0]
    assert line == ("Engine time by phase over 2 restarts: engine set-up 0.4 min (8%), compile 0.6 min (12%), "
                    "memory profiling 0.1 min (1%), graph capture 0.0 min (0%), kernel warm-up 1.7 min (34%), "
                    "other start-up 2.2 min (45%)")
    assert encode(totals)["seconds"][F.PHASE_KERNEL_WARMUP_S] == 102.0  # report --json: the fact's own key

# -- the noise prior (issue 21 item 1: a rule that can decide before its cap) ----------------------------------

_DATA = Path(__file__).resolve().parents[1] / "data" / "warmup_series.json"


def _h200_prior() -> tuple[float, float]:
    """The prior the H200 MoE study's own timed passes give (every restart's, 4 rounds each): sd about 0.17."""
    pool = warmup.NoisePool()
    for r in json.loads(_DATA.read_text())["h200_moe"]:
        pool.add(r["passes_tok_s"], r["pass_rounds"])
    prior = pool.prior()
    assert prior is not None
    return prior


def _stop_with(series: list[float], prior, minimum: int = 1, maximum: int = 20) -> tuple[int, str]:
    for n in range(len(series) + 1):
        if (why := warmup.warmup_stop(series[:n], minimum, maximum, prior)) is not None:
            return n, why
    raise AssertionError("the rule never stopped within the series")


def test_the_h200_prior_is_the_measured_pass_noise() -> None:
    sd, df = _h200_prior()
    assert 0.12 < sd < 0.25 and df == 32  # 16 restarts x 2 degrees of freedom


def test_with_a_prior_flat_noise_mostly_stops_at_the_third_pass_and_never_without_one() -> None:
    rng = random.Random(5)
    sd = 0.10
    prior = (sd, 20)
    stops_with, stops_without = [], []
    for _ in range(300):
        series = [3500.0 * math.exp(rng.gauss(0.0, sd)) for _ in range(12)]
        series[0] *= 0.4  # the first pass's lazy initialisation
        stops_with.append(_stop_with(series, prior, maximum=4))
        stops_without.append(_stop_with(series, None, maximum=4))
    at_three = sum(n == 3 for n, _ in stops_with) / len(stops_with)
    assert at_three > 0.75  # a rise taken for warming about one time in seven (TREND_LEVEL)
    assert all(why == "prior" for n, why in stops_with if n == 3)
    assert min(n for n, _ in stops_without) == 4  # the rule alone cannot decide before its fourth pass


def test_with_a_prior_the_issue_baseline_stops_at_the_third_pass() -> None:
    baseline = [3517.0, 3401.0, 3773.0, 2831.0]
    assert _stop_with(baseline, _h200_prior(), maximum=4) == (3, "prior")
    assert _stop_with(baseline, None, maximum=4) == (4, "cap")


def test_with_the_h200_prior_the_measured_ramp_keeps_warming_up() -> None:
    prior = _h200_prior()
    ramp = [720.0, 1586.0, 2089.0, 3826.0]
    assert not warmup.is_warm(ramp[:3], prior)  # still rising at the third pass: no stop inside the ramp
    assert _stop_with(ramp + [3800.0] * 4, prior, maximum=4) == (4, "cap")
    # A longer ramp of the same shape is never taken for warm while it climbs (cap out of the way).
    longer = [500.0, 900.0, 1400.0, 1900.0, 2500.0, 3100.0, 3700.0]
    n, why = _stop_with(longer + [3800.0] * 6, prior)
    assert n >= len(longer) and why == "prior"


def test_a_material_rise_against_a_small_known_noise_is_rising() -> None:
    # 10% up between the two judged passes: noise when passes swing 15%, a ramp when they swing 1%.
    series = [800.0, 3000.0, 3300.0]
    assert warmup.is_warm(series, (0.15, 30))
    assert not warmup.is_warm(series, (0.01, 30))
    # Below MIN_DRIFT a rise is never worth warming up for, however quiet the process.
    assert warmup.is_warm([800.0, 3000.0, 3030.0], (0.001, 30))


def test_an_unusable_prior_is_no_prior() -> None:
    series = [800.0, 3000.0, 3010.0]
    assert warmup.is_warm(series, (0.05, 10))
    for bad in (None, (0.05, 1), (-0.1, 10), (float("nan"), 10), "x", {"log_sd": 0.05}, {"log_sd": "a", "df": 3}):
        assert warmup.noise_prior(bad) is None
        assert not warmup.is_warm(series, bad)  # three passes: too few for the rule alone
    assert warmup.noise_prior({"log_sd": 0.05, "df": 10}) == (0.05, 10.0)


def test_warmup_stop_says_what_ended_the_warm_up() -> None:
    flat = [1000.0, 1000.0, 1000.0, 1000.0, 1000.0]
    assert warmup.warmup_stop([], 0, 4) == "none"
    assert warmup.warmup_stop(flat[:2], 1, 4, (0.05, 10)) is None
    assert warmup.warmup_stop(flat[:3], 1, 4, (0.05, 10)) == "prior"
    assert warmup.warmup_stop(flat[:4], 1, 8) == "rule"
    assert warmup.warmup_stop([100.0, 200.0, 400.0, 800.0], 1, 4, (0.05, 10)) == "cap"


def test_the_noise_pool_scales_timed_passes_to_one_round() -> None:
    pool = warmup.NoisePool()
    assert pool.prior() is None
    pool.add([1000.0])  # one pass: no spread
    pool.add([1000.0, 0.0])  # a pass that failed is left out
    assert pool.prior() is None
    pool.add([1000.0 * math.exp(0.05), 1000.0 * math.exp(-0.05)], rounds=4)
    assert pool.prior() is None  # one degree of freedom is too thin (MIN_PRIOR_DF)
    pool.add([1000.0 * math.exp(0.05), 1000.0 * math.exp(-0.05)], rounds=4)
    sd, df = pool.prior()
    # Each pair's log sd is 0.05 * sqrt(2); a pass of four rounds averages four: one round's is twice that.
    assert df == 2 and sd == pytest.approx(0.1 * math.sqrt(2))


@pytest.mark.parametrize(("df", "expected"), [(1, 1.9626), (2, 1.3862), (5, 1.1558), (30, 1.0547), (1000, 1.0366)])
def test_t_quantile_at_the_rule_level(df: float, expected: float) -> None:
    assert warmup.t_quantile(1 - warmup.TREND_LEVEL, df) == pytest.approx(expected, abs=2e-3)
    assert warmup.t_quantile(1 - warmup.TREND_LEVEL, 1) == pytest.approx(warmup.TREND_T, abs=0.05)


def test_the_study_hands_the_prior_to_the_engine_from_its_second_restart() -> None:
    from autotune.core import facts as F
    from autotune.core.records import EngineConfig, RestartResult, Workload
    from autotune.engines import EngineBackend
    from autotune.study._restart import measure_restart

    class Recording(EngineBackend):
        name = "recording"

        def __init__(self) -> None:
            super().__init__()
            self.priors: list = []

        def run_restart(self, config, workload, *, restart, seed):
            self.priors.append(self.warmup_noise.prior())
            return RestartResult("ok", restart=restart, seed=seed, passes_tok_s=(1000.0, 1100.0, 950.0),
                                 facts={F.PASS_ROUNDS: 4})

    engine = Recording()
    for j in range(2):
        measure_restart(engine, EngineConfig(engine_args={"model": "m"}), Workload(), restart=j, seed=j)
    assert engine.priors[0] is None
    sd, df = engine.priors[1]
    assert df == 2 and 0.1 < sd < 0.3  # the first restart's three passes, scaled to one round


def test_the_simulator_stops_warm_up_by_the_prior_once_the_study_has_one() -> None:
    from autotune.core import facts as F
    from autotune.core.records import EngineConfig, Workload
    from autotune.engines import make_engine
    from autotune.study._restart import measure_restart

    engine = make_engine("sim")
    config = EngineConfig(engine_args={"model": "m", "max_num_seqs": 8})
    rules, passes = [], []
    for j in range(3):
        for result in measure_restart(engine, config, Workload(), restart=j, seed=j):  # the first: cold, then warm
            assert result.ok
            rules.append(result.facts[F.WARMUP_RULE])
            passes.append(len(result.warmup_tok_s))
    assert len(rules) == 4
    assert rules[0] in ("rule", "cap") and passes[0] == 4  # no prior yet: the rule alone, at its fourth pass
    assert "prior" in rules[1:] and min(passes[1:]) == 3


def test_the_report_says_what_ended_the_warm_ups() -> None:
    from autotune.core import facts as F
    from autotune.core.records import RestartResult
    from autotune.report.phases import phase_totals, render_phases

    def restart(rule: str, passes: int) -> RestartResult:
        return RestartResult("ok", passes_tok_s=(1.0,), facts={F.PHASE_TIMED_S: 15.0, F.WARMUP_PASSES: passes,
                                                               F.WARMUP_RULE: rule})

    totals = phase_totals([restart("cap", 4), restart("prior", 3), restart("prior", 3)])
    assert totals is not None and dict(totals.warmup_rules) == {"prior": 2, "cap": 1}
    assert encode(totals)["warmup_rules"] == {"prior": 2, "cap": 1}
    line = render_phases(totals)[-1]
    assert "3.3 passes" in line and "the rule with the study's noise prior 2, the cap 1" in line


def test_the_rules_replayed_on_a_studys_restarts_reproduce_what_it_did() -> None:
    # The side-by-side of issue 21's H200 record: each rule replayed on the passes the study ran. A study run under
    # the old rule replays to its own stops under "old 3%"; one run under the prior replays to its own under "prior".
    from autotune.bench.warmup import old_rule, replay_study
    from autotune.core import facts as F
    from autotune.core.records import RestartResult

    def restart(warm, timed, rule=None):
        facts = {F.PASS_ROUNDS: 3, **({F.WARMUP_RULE: rule} if rule else {})}
        return RestartResult("ok", passes_tok_s=tuple(timed), warmup_tok_s=tuple(warm), facts=facts)

    series = [([900.0, 1000.0, 1020.0], [1010.0, 1005.0, 1012.0]),      # the old rule stops at 3 (2% apart)
              ([700.0, 1500.0, 2100.0, 3800.0], [3900.0, 3850.0, 3870.0]),  # a ramp: the cap
              ([1000.0, 1100.0, 1000.0, 950.0], [1020.0, 990.0, 1001.0])]   # noise: the cap
    old = [restart(w, t) for w, t in series]
    rows = {r["rule"]: r for r in replay_study(old)}
    assert rows["as run"]["passes"] == pytest.approx(11 / 3) and rows["as run"]["by_rule"] is None  # not recorded
    expected = []
    for w, t in series:
        n = next(n for n in range(len(w) + len(t) + 1) if old_rule([*w, *t][:n]) is not None)
        expected.append(n)
    assert expected == [3, 4, 4] and rows["old 3%"]["passes"] == pytest.approx(11 / 3)
    assert rows["old 3%"]["by_rule"] == pytest.approx(1 / 3) and rows["old 3%"]["ran_out"] == 0
    assert rows["MSER+trend"]["passes"] == 4.0  # without a prior the rule needs three judged passes: the cap
    # A restart that failed, or one without warm-up values, is left out; the recorded rule is read when present.
    said = replay_study([*old, RestartResult("failed", error="boom"), restart([1.0, 1.0], [1.0, 1.0], "prior")])
    assert said[0]["restarts"] == 4 and said[0]["by_rule"] == 1.0


def test_the_replay_is_one_line_errors_without_its_pair_of_flags(capsys) -> None:
    from autotune.bench.warmup import main

    with pytest.raises(SystemExit) as exit_:
        main(["--study", "x"])
    assert exit_.value.code == 2 and "--study and --storage go together" in capsys.readouterr().err
