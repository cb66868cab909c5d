"""Cold starts: the study's own test of whether they differ, warm-up convergence, screening from a cold start, and
budgets priced per kind of start."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotune.stats.coldstart import (
    ColdVerdict,
    cold_pairs,
    equivalence_margin,
    judge_cold,
    warm_estimate,
    warm_upper_bound,
    warmup_converged,
)
from autotune.decisions.racing import RacingPolicy
from autotune.core.records import EngineConfig, RestartResult, Workload
from autotune.records import decode, encode
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.study import BudgetTooSmall, StudyOptions, run_study, smallest_restart_budget
from autotune.study._budget import minimum_plan
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

TRUTH = {("PIECEWISE", 0): 100.0, ("NONE", 0): 40.0, ("FULL_AND_PIECEWISE", 0): 105.0, ("PIECEWISE", 1): 120.0,
         ("FULL_AND_PIECEWISE", 1): 150.0, ("default", 0): 90.0, ("default", 1): 95.0}


#: SMALL_SPACE with room for a few dozen configurations, so a study outlives the pairs that decide its verdict.
WIDE_SPACE = {**SMALL_SPACE, "search": {**SMALL_SPACE["search"], "capture_sizes": {"tiny": [1, 2, 4, 8],
                                                                                  "wide": [1, 2, 4, 8, 16, 32]},
                                         "num_speculative_tokens": {"low": 0, "high": 4}}}


def _restart(value: float, *, cold: bool, seed: int, warmup: tuple[float, ...] = ()) -> RestartResult:
    return RestartResult(status="ok", seed=seed, passes_tok_s=(value, value), warmup_tok_s=warmup, cold=cold)


def _pairs(ratio_low: float, ratio_high: float, n: int, noise: float, seed: int = 0) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        warm = 100.0 * math.exp(rng.gauss(0.0, noise))
        out.append((100.0 * rng.uniform(ratio_low, ratio_high) * math.exp(rng.gauss(0.0, noise)), warm))
    return out


class SteadyEngine(FakeEngine):
    """A FakeEngine whose warm-up converges (two passes within 1%), as the ``vllm`` runner's does, and whose two
    starts on one seed differ a little (``rerun_noise``), as two processes do."""

    def __init__(self, *args, rerun_noise: float = 0.005, **kw) -> None:
        super().__init__(*args, **kw)
        self.rerun_rng = random.Random(1)
        self.rerun_noise = rerun_noise

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        result = super().run_restart(config, workload, restart=restart, seed=seed)
        if not result.ok:
            return result
        jitter = math.exp(self.rerun_rng.gauss(0.0, self.rerun_noise))
        passes = tuple(v * jitter for v in result.passes_tok_s)
        return dataclasses.replace(result, passes_tok_s=passes,
                                   warmup_tok_s=(passes[0] * 0.7, passes[0] * 0.99, passes[0] * 0.995))


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="cold", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                trials=12, verify=False, seed=0)
    base.update(kw)
    return StudyOptions(**base)


# -- the test itself -------------------------------------------------------------------------------------


def test_cold_starts_40_percent_slow_are_found_to_differ_and_not_counted():
    verdict = judge_cold(_pairs(0.5, 0.7, 4, 0.03), noise_sd=0.03)
    assert verdict.state == "differ" and not verdict.counts
    assert verdict.p_value < 0.05 and 0.5 < verdict.ratio < 0.75
    assert "not counted" in verdict.describe()


def test_cold_starts_no_slower_count_once_equivalence_within_the_restart_noise_is_shown():
    pairs = _pairs(1.0, 1.0, 8, 0.01, seed=3)
    verdict = judge_cold(pairs, noise_sd=0.04)
    assert verdict.state == "same" and verdict.counts and "counted as a restart" in verdict.describe()
    assert judge_cold(pairs[:2], noise_sd=0.04).state == "undecided"  # fewer pairs than the test needs
    # No margin without the restart noise: not equivalent, but no difference and a mean within the pairs' noise.
    assert judge_cold(pairs, noise_sd=None).state == "provisional"
    assert equivalence_margin(0.04, 1) == pytest.approx(0.04 / math.sqrt(3.841), rel=1e-3)  # chi2(1) 95%: 3.841
    assert 0.04 * 0.7 < equivalence_margin(0.04, 30) < 0.04
    # The margin is the study's own noise: the same pairs are not equivalent within a tenth of it.
    assert judge_cold(pairs, noise_sd=0.004).state == "provisional"


def test_cold_starts_count_provisionally_only_while_their_measured_bias_is_within_the_pairs_noise():
    # Three pairs, no difference: the mean log ratio (+0.01) is inside sd/sqrt(2) of the pairs (~0.035).
    close = [(101.0, 100.0), (96.0, 100.0), (106.0, 100.0)]
    verdict = judge_cold(close, noise_sd=None)
    assert verdict.state == "provisional" and verdict.counts
    assert "until a difference is found" in verdict.describe()
    assert judge_cold(close[:2], noise_sd=None).state == "undecided"  # fewer than MIN_PAIRS
    # A bias of ~-15% on noisy pairs: not significant at 3 pairs, but larger than their noise: not counted.
    far = [(70.0, 100.0), (95.0, 100.0), (90.0, 100.0)]
    verdict = judge_cold(far, noise_sd=None)
    assert verdict.p_value > 0.05 and verdict.state == "undecided" and not verdict.counts
    # Counting provisionally stops at the first significant difference, for good.
    slow = close + _pairs(0.55, 0.65, 4, 0.02)
    assert judge_cold(slow, noise_sd=None, previous="provisional").state == "differ"
    assert judge_cold(close, noise_sd=None, previous="differ").state == "differ"


def test_differ_is_final_and_same_holds_until_a_difference_is_significant():
    assert judge_cold(_pairs(1.0, 1.0, 3, 0.03, seed=1), noise_sd=0.03, previous="same").state == "same"
    assert judge_cold(_pairs(0.5, 0.6, 5, 0.02), noise_sd=0.03, previous="same").state == "differ"
    assert judge_cold(_pairs(1.0, 1.0, 8, 0.01), noise_sd=0.04, previous="differ").state == "differ"


def test_a_verdict_round_trips_through_its_stored_form():
    verdict = judge_cold(_pairs(0.5, 0.7, 4, 0.03), noise_sd=0.03)
    back = decode(ColdVerdict, encode(verdict))
    assert (back.state, back.pairs) == (verdict.state, verdict.pairs)
    assert back.ratio == pytest.approx(verdict.ratio) and back.p_value == pytest.approx(verdict.p_value)
    assert decode(ColdVerdict, {}).state == "undecided"
    assert encode(verdict)["text"] == verdict.describe()


def test_pairs_match_the_cold_start_with_the_warm_restart_on_its_seed():
    groups = [
        [_restart(60.0, cold=True, seed=7), _restart(100.0, cold=False, seed=7), _restart(90.0, cold=False, seed=8)],
        [_restart(50.0, cold=True, seed=7), _restart(80.0, cold=False, seed=9), _restart(125.0, cold=False, seed=10)],
        [_restart(50.0, cold=True, seed=7)],  # no warm restart: no pair
        [_restart(50.0, cold=False, seed=7)],  # no cold start: no pair
    ]
    pairs = cold_pairs(groups)
    assert pairs[0] == pytest.approx((60.0, 100.0))
    assert pairs[1] == pytest.approx((50.0, 100.0))  # geometric mean of its warm restarts on other seeds
    assert len(pairs) == 2


def test_warm_up_converged_only_when_its_last_two_passes_agree():
    assert warmup_converged(_restart(100.0, cold=True, seed=0, warmup=(60.0, 99.0, 100.0)))
    assert not warmup_converged(_restart(100.0, cold=True, seed=0, warmup=(60.0, 90.0)))  # stopped at its cap
    assert not warmup_converged(_restart(100.0, cold=True, seed=0, warmup=(99.0,)))  # one pass says nothing
    assert not warmup_converged(_restart(100.0, cold=True, seed=0))


@pytest.mark.parametrize(("rule", "converged"), [("rule", True), ("prior", True), ("cap", False), ("none", False)])
def test_warm_up_converged_is_what_the_engines_warm_up_rule_decided_where_it_says(rule, converged):
    # A ramp whose last two passes happen to agree within 3% (the old test would call it steady) but that the
    # MSER/trend rule ran to its cap, and noise the rule called warm whose last two passes differ by 10%.
    ramp = dataclasses.replace(_restart(100.0, cold=True, seed=0, warmup=(40.0, 70.0, 98.0, 100.0)),
                               facts={"warmup_rule": rule})
    noisy = dataclasses.replace(_restart(100.0, cold=True, seed=0, warmup=(100.0, 95.0, 105.0)),
                                facts={"warmup_rule": rule})
    assert warmup_converged(ramp) is converged and warmup_converged(noisy) is converged
    assert warmup_converged(dataclasses.replace(ramp, facts={}))  # without a rule: the last two passes' 3%


def test_a_cold_start_predicts_the_warm_throughput_with_a_bound_that_holds_its_level():
    rng = random.Random(5)
    misses, trials = 0, 1000
    pairs: list[tuple[float, float]] = []
    for i in range(trials):
        pairs = _pairs(0.4, 0.7, 6, 0.04, seed=1000 + i)
        warm = 100.0 * math.exp(rng.gauss(0.0, 0.04))
        cold = 100.0 * rng.uniform(0.4, 0.7) * math.exp(rng.gauss(0.0, 0.04))
        bound = warm_upper_bound(cold, pairs, 0.95)
        assert bound is not None and bound > warm_estimate(cold, pairs)  # type: ignore[operator]
        misses += warm > bound
    assert 0.02 < misses / trials < 0.08
    assert warm_upper_bound(50.0, pairs[:2], 0.95) is None


# -- inside a study --------------------------------------------------------------------------------------


def test_a_study_whose_cold_starts_are_no_slower_starts_counting_them_and_says_so(tmp_path):
    engine = SteadyEngine(by_params(TRUTH), noise=0.03, cold_first=True, cold_factor=1.0)
    # Two counted restarts a trial (--restarts 2): the restart noise, the equivalence margin, is known early.
    ledger = run_study(parse_space(WIDE_SPACE), engine,
                       _options(tmp_path, trials=20, policy=RacingPolicy(min_restarts=2)))
    verdict = ledger.cold_verdict()
    assert verdict.state == "same"
    counted_cold = 0
    for t in ledger.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)):
        restarts = ledger.restarts(t)
        if not restarts or not restarts[0].cold:
            continue
        if 0 in t.intermediate_values and len(restarts) == len(t.intermediate_values):
            counted_cold += 1  # the cold start is restart 0's observation: no warm rerun of its seed
            assert ledger.summary(t).n_cold == 0 and restarts[0].seed not in [r.seed for r in restarts[1:]]
    assert counted_cold >= 1
    report = build_report(ledger)
    assert "counted as a restart" in render_report(report)
    shown = [r for t in report.to_json()["search_trials"] for r in t["restarts"] if r["cold"]]
    assert sum(r["counted"] for r in shown) >= counted_cold and not all(r["counted"] for r in shown)


def test_with_one_counted_restart_a_study_counts_cold_starts_provisionally_once_its_pairs_show_no_difference(tmp_path):
    # One counted restart a trial (the default): pooled restart noise comes late, equivalence later still. The
    # pairs of the first configurations show no difference, so new configurations stop paying a warm rerun.
    engine = SteadyEngine(by_params(TRUTH), noise=0.03, cold_first=True, cold_factor=1.0)
    ledger = run_study(parse_space(WIDE_SPACE), engine, _options(tmp_path, trials=16))
    verdict = ledger.cold_verdict()
    assert verdict.counts and verdict.state in ("provisional", "same")
    single = [t for t in ledger.study.get_trials(states=(TrialState.COMPLETE,))
              if [r.cold for r in ledger.restarts(t)] == [True] and t.intermediate_values]
    assert single, "some configuration entered the race on its cold start alone"
    assert "counted as a restart" in render_report(build_report(ledger))


def test_a_study_whose_cold_starts_are_slow_stops_counting_them_and_screens_with_them(tmp_path):
    import io

    from autotune.observers.progress import ProgressPrinter

    engine = SteadyEngine(by_params(TRUTH), noise=0.02, cold_first=True, cold_factor=0.6)
    progress = io.StringIO()
    ledger = run_study(parse_space(SMALL_SPACE), engine, _options(tmp_path, trials=14),
                       observers=[ProgressPrinter(stream=progress)])
    assert ledger.cold_verdict().state == "differ"
    for t in ledger.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)):
        restarts = ledger.restarts(t)
        assert len(t.intermediate_values) == sum(1 for r in restarts if not r.cold)  # never an observation
    screened = [t for t in ledger.study.trials if "screened" in (ledger.pruned_reason(t) or "")]
    assert screened, "NONE runs at 40% of the incumbent: its cold start alone rules it out"
    for t in screened:
        assert [r.cold for r in ledger.restarts(t)] == [True] and not t.intermediate_values
        assert ledger.summary(t).values == ()  # never a verification candidate
        # The live line says why it stopped (the H100 MoE study printed "done: no successful restarts" here).
        assert re.search(rf"trial {t.number} screened on its cold start: warm throughput predicted at \d+\.\d "
                         r"tok/s", progress.getvalue())
    assert "no successful restarts" not in progress.getvalue()
    text = render_report(build_report(ledger))
    assert re.search(r"Cold starts ran -[34]\d\.\d% against warm restarts .* recorded, not counted", text)


# -- budgets ---------------------------------------------------------------------------------------------


def test_a_restart_budget_too_small_for_one_search_trial_is_refused_before_any_start(tmp_path):
    space = parse_space(SMALL_SPACE)
    options = _options(tmp_path, verify=True, top_k=1, verify_restarts=3, budget_restarts=10)
    # Two baselines (cold + 2, cold + 1), one search trial (cold + 1), verification (2 x 3).
    assert len(minimum_plan(space, options)) == smallest_restart_budget(space, options) == 13
    engine = FakeEngine(by_params(TRUTH))
    with pytest.raises(BudgetTooSmall, match=r"--budget-restarts 10 is too small .* use --budget-restarts 13 or more"):
        run_study(space, engine, options)
    assert engine.calls == []
    ledger = run_study(space, engine, dataclasses.replace(options, budget_restarts=13, fresh=True))
    assert ledger.budget_used()[0] <= 13 and ledger.verification() is not None
    assert ledger.finished_search_trials() >= 3  # the baselines and a search trial


def test_a_minutes_budget_prices_cold_and_warm_starts_apart(tmp_path):
    # Cold starts cost 10 engine-minutes, warm ones 1: pricing every start at the mean of those seen so far (a
    # cold-heavy 4 minutes early on) would hold back ~4x what verification costs and leave no room for search.
    engine = FakeEngine(by_params(TRUTH), cold_first=True, cold_wall_s=600.0, wall_s=60.0)
    options = _options(tmp_path, trials=50, verify=True, top_k=1, verify_restarts=3, budget_minutes=75.0)
    ledger = run_study(parse_space(SMALL_SPACE), engine, options)
    used, minutes = ledger.budget_used()
    assert minutes <= 75.0 and ledger.verification() is not None
    assert ledger.finished_search_trials() >= 4  # two baselines and at least two search trials



def _start(cold: bool, pass_s: float, warmup_passes: int, cache_s: float, fixed_s: float = 20.0,
           phases: bool = True):
    """A successful start: ``fixed_s`` of set-up and load, ``cache_s`` of compile, warm-up and three timed passes of
    ``pass_s`` each, 2 s of shutdown; with ``phases=False`` the same start from an engine that reports none."""
    from autotune.core import facts as F
    from autotune.core.records import RestartResult

    timed = (pass_s,) * 3
    facts = {F.PHASE_LOAD_S: fixed_s, F.PHASE_COMPILE_S: cache_s, F.PHASE_WARMUP_S: warmup_passes * pass_s,
             F.PHASE_TIMED_S: sum(timed), F.WARMUP_PASSES: warmup_passes}
    wall = fixed_s + cache_s + warmup_passes * pass_s + sum(timed) + 2.0
    return RestartResult("ok", passes_tok_s=(1.0,) * 3, passes_s=timed, cold=cold, wall_s=wall,
                         facts=facts if phases else {})


def test_a_warm_restart_is_priced_by_its_own_pass_length_not_by_other_configurations_restarts():
    # Configuration "slow" ran 10 s passes (and its warm restarts 8 warm-up passes each); "fast" has only its cold
    # start, with 2 s passes. A warm restart of "fast" pays the warm start-up, its own warm-up (16 s) and 3 timed
    # passes of 2 s: 22 + 5 + 16 + 6 = 49 s. The whole-restart price has no warm restart of "fast" and charges the
    # study's warm mean, slow's 137 s.
    from autotune.study._budget import StartCosts

    runs = [("slow", _start(True, 10.0, 8, cache_s=60.0)), ("slow", _start(False, 10.0, 8, cache_s=5.0)),
            ("slow", _start(False, 10.0, 8, cache_s=5.0)), ("fast", _start(True, 2.0, 8, cache_s=60.0))]
    costs = StartCosts.from_runs(runs)
    whole = StartCosts.from_runs((k, dataclasses.replace(r, facts={})) for k, r in runs)
    truth = _start(False, 2.0, 8, cache_s=5.0).wall_s / 60.0
    assert costs.price(("fast", False)) == pytest.approx(truth)
    assert whole.price(("fast", False)) == pytest.approx(137.0 / 60.0)
    # A cold start pays the cold compile (60 s) that warm restarts do not (5 s); a configuration not seen yet gets
    # the warm-up of the study's cold starts, (80 + 16) / 2 = 48 s, and its mean timed pass, (10 + 10 + 10 + 2) / 4 =
    # 8 s: 22 + 60 + 48 + 3 x 8 = 154 s.
    assert costs.price((None, True)) == pytest.approx(154.0 / 60.0)
    assert costs.price(("fast", True)) == pytest.approx(_start(True, 2.0, 8, cache_s=60.0).wall_s / 60.0)
    assert costs.price(("slow", False)) == pytest.approx(_start(False, 10.0, 8, cache_s=5.0).wall_s / 60.0)
    assert costs.forecast([("fast", False), ("slow", False)]) == pytest.approx(truth + 137.0 / 60.0)


def test_warm_up_is_priced_by_the_seconds_it_took_not_by_the_timed_passes_length():
    # Timed passes are sized to workload.pass_seconds (5 s here); warm-up passes are one round of the prompts each
    # (1 s): four of them took 4 s, not 4 x 5 s. A warm restart: 22 s start-up, 5 s cache, 4 s warm-up, 3 x 5 s.
    from autotune.core import facts as F
    from autotune.study._budget import StartCosts

    def start(cold: bool, cache_s: float):
        r = _start(cold, 5.0, 0, cache_s=cache_s)
        facts = {**r.facts, F.PHASE_WARMUP_S: 4.0, F.WARMUP_PASSES: 4}
        return dataclasses.replace(r, facts=facts, wall_s=r.wall_s + 4.0)

    costs = StartCosts.from_runs([("a", start(True, 60.0)), ("a", start(False, 5.0))])
    assert costs.price(("a", False)) == pytest.approx((22.0 + 5.0 + 4.0 + 15.0) / 60.0)
    assert costs.price(("b", False)) == pytest.approx((22.0 + 5.0 + 4.0 + 15.0) / 60.0)


def test_starts_without_phases_are_priced_at_the_whole_restart_mean_of_their_kind():
    # The cmd engine, records from before phases: every start is priced as before. A kind no phased start has shown
    # (here warm restarts that did not report phases) falls back too, while a phased kind is priced by phases.
    from autotune.study._budget import StartCosts

    bare = [("a", _start(True, 10.0, 4, cache_s=60.0, phases=False)),
            ("a", _start(False, 10.0, 4, cache_s=5.0, phases=False)),
            ("b", _start(False, 4.0, 4, cache_s=5.0, phases=False))]
    costs = StartCosts.from_runs(bare)
    assert costs.phased == () and costs.known
    assert costs.price(("a", True)) == pytest.approx(bare[0][1].wall_s / 60.0)
    assert costs.price(("b", False)) == pytest.approx(bare[2][1].wall_s / 60.0)
    assert costs.price((None, False)) == pytest.approx((bare[1][1].wall_s + bare[2][1].wall_s) / 120.0)
    mixed = StartCosts.from_runs([("a", _start(True, 10.0, 4, cache_s=60.0)), *bare[1:]])
    assert mixed.price(("b", False)) == pytest.approx(bare[2][1].wall_s / 60.0)
    assert mixed.price((None, True)) == pytest.approx(_start(True, 10.0, 4, cache_s=60.0).wall_s / 60.0)
    assert StartCosts.from_runs([]).price((None, True)) == 0.0  # nothing measured: the first start is the measurement

def test_a_minutes_budget_too_small_is_refused_once_a_start_has_been_priced(tmp_path):
    engine = FakeEngine(by_params(TRUTH), cold_first=True, cold_wall_s=600.0, wall_s=60.0)
    options = _options(tmp_path, verify=True, top_k=1, verify_restarts=3, budget_minutes=20.0)
    with pytest.raises(BudgetTooSmall, match=r"--budget-minutes 20 is too small .* 600 s per cold start and 60 s "
                                             r"per warm one\): use --budget-minutes 40 or more"):
        run_study(parse_space(SMALL_SPACE), engine, options)
    # A resumed study knows what its starts cost: the same too-small budget is refused before any start.
    calls = len(engine.calls)
    with pytest.raises(BudgetTooSmall, match="use --budget-minutes 40 or more"):
        run_study(parse_space(SMALL_SPACE), engine, options)
    assert len(engine.calls) == calls



def test_the_restart_line_says_whether_a_cold_start_counted():
    import io
    import types

    from autotune.stats.coldstart import ColdVerdict
    from autotune.observers.progress import ProgressPrinter

    def line(state: str, warmup: tuple[float, ...], phase: str = "search") -> str:
        out = io.StringIO()
        ctx = types.SimpleNamespace(ledger=types.SimpleNamespace(cold_verdict=lambda: ColdVerdict(state=state)))
        ProgressPrinter(stream=out).on_restart(ctx, phase, "", _restart(100.0, cold=True, seed=0, warmup=warmup))
        return out.getvalue()

    converged, unsettled = (90.0, 100.0, 100.0), (50.0, 100.0)
    assert "cold first start: counted" in line("same", converged)
    assert "recorded, not counted" in line("same", unsettled), "a cold start whose warm-up did not settle never counts"
    assert "recorded, not counted" in line("differ", converged)
    assert "recorded, not counted" in line("undecided", converged)
    assert "cold first start: counted" in line("provisional", converged)
    assert "recorded, not counted" in line("provisional", unsettled)
    assert "recorded, not counted" in line("same", converged, phase="verify"), "verification never counts one"


def test_a_warm_restart_is_not_charged_the_first_starts_forkserver_boot():
    # On the H200 dummy space the study's first start (cold) booted vLLM's forkserver host: 21.1 s of launch and
    # 22.5 s of set-up that a forked restart does not pay. Averaged into every start, a warm restart was priced at
    # 51 s against the 29.5 s it took, and a 16-minute budget the study fitted was refused as too small.
    from autotune.study._budget import StartCosts

    first = _start(True, 2.0, 4, cache_s=90.0, fixed_s=45.0)
    warm = _start(False, 2.0, 4, cache_s=3.0, fixed_s=6.0)
    costs = StartCosts.from_runs([("base", first), ("base", warm)])
    assert costs.price(("base", False)) == pytest.approx(warm.wall_s / 60.0)
    assert costs.price(("other", False)) == pytest.approx(warm.wall_s / 60.0)
    assert costs.price((None, True)) == pytest.approx(first.wall_s / 60.0)


class _JitEngine(FakeEngine):
    """A new configuration starts cold (60 s); the first start into the empty caches compiles what every
    configuration shares (240 s); a warm restart takes 30 s. With ``says=False`` the engine does not report it."""

    def __init__(self, says: bool = True) -> None:
        super().__init__(by_params(TRUTH), cold_first=True, cold_wall_s=60.0, wall_s=30.0)
        self.says, self.filled = says, False

    def caches_empty(self):
        return (not self.filled) if self.says else None

    def run_restart(self, config, workload, *, restart, seed):
        empty = not self.filled
        result = super().run_restart(config, workload, restart=restart, seed=seed)
        self.filled = True
        if empty:
            result = dataclasses.replace(result, wall_s=240.0)
        return dataclasses.replace(result, facts={**result.facts, "caches_empty": empty} if self.says else result.facts)


def test_a_start_into_empty_caches_is_priced_apart_from_later_cold_starts():
    # On the H200 the first start into empty caches took 170-190 s, later configurations' cold starts 38-90 s.
    # Resumed on a fresh machine, a study whose only cold starts were such first starts priced every planned cold
    # start at ~185 s and ended its search with 12.2 of 20 engine-minutes left.
    from autotune.core import facts as F
    from autotune.study._budget import StartCosts

    def start(cold, wall, empty=None):
        facts = {} if empty is None else {F.CACHES_EMPTY: empty}
        return RestartResult("ok", passes_tok_s=(1.0,) * 3, passes_s=(1.0,) * 3, cold=cold, wall_s=wall, facts=facts)

    only_empty = StartCosts.from_runs([("a", start(True, 180.0, True)), ("a", start(False, 30.0, False))])
    assert only_empty.price((None, True)) == pytest.approx(3.0)  # nothing else ran cold: the safe side
    later = StartCosts.from_runs([("a", start(True, 180.0, True)), ("a", start(False, 30.0, False)),
                                  ("b", start(True, 60.0, False))])
    assert later.price((None, True)) == pytest.approx(1.0)
    # Where the engine says its caches are empty now, the forecast's first cold start is priced as such a start.
    plan = [(None, False), (None, True), (None, True)]
    assert later.forecast(plan, empty=True) == pytest.approx(0.5 + 3.0 + 1.0)
    assert later.forecast(plan) == pytest.approx(0.5 + 1.0 + 1.0)
    # Records that do not say (older ones, other engines) are priced as before: every cold start together.
    silent = StartCosts.from_runs([("a", start(True, 180.0)), ("a", start(False, 30.0)), ("b", start(True, 60.0))])
    assert silent.price((None, True)) == pytest.approx(2.0) and silent.forecast(plan, empty=True) == pytest.approx(4.5)


def test_a_minutes_budget_buys_more_search_once_starts_into_empty_caches_are_priced_apart(tmp_path):
    # The same study, once with an engine that says which start went into empty caches and once with one that
    # does not: the 240 s first start no longer prices every new configuration's cold start (60 s).
    space = parse_space(SMALL_SPACE)
    done = {}
    for says in (True, False):
        options = _options(tmp_path / str(says), trials=50, verify=True, top_k=1, verify_restarts=2,
                           budget_minutes=16.0)
        ledger = run_study(space, _JitEngine(says), options)
        done[says] = ledger.finished_search_trials()
        assert ledger.budget_used()[1] <= 16.0 and ledger.verification() is not None
    assert done[True] > done[False], done
