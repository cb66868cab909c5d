"""Verdicts on a real, drifting machine (issue 41): a noise prior that cannot collapse, the analysis by round, its
level on a drifting null with unequal and lost restarts, the three-way answer, what the budget can prove up front,
and advice whose probability holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.records import encode
from autotune.cli._main import raw_main
from autotune.config.space import parse_space
from autotune.core.records import EngineFacts
from autotune.decisions.noise import DEFAULT_CV, NoisePrior, planning_noise, study_prior
from autotune.decisions.planning import budget_reach, paired_power, plan_rounds
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate
from autotune.report._verdict import decision_chance
from autotune.stats.intervals import PairPrior, Verdict, compare_paired, matched_pairs
from autotune.study import run_verification
from tests.conftest import SMALL_SPACE, FakeEngine
from tests._helpers.landscape import BETTER

#: The H100 study of issue 41, in time order: round, winner tok/s, baseline tok/s (8 rounds over 11 minutes).
H100_ROUNDS = [(3352, 2465), (3641, 2983), (3092, 2892), (3552, 3404), (3953, 3120), (2889, 2876), (2767, 2609),
               (2918, 2805)]


def _cv(variance: float) -> float:
    return math.sqrt(math.expm1(variance))


# -- 1. a noise prior that cannot collapse -------------------------------------------------------------------------


def test_two_equal_restarts_never_plan_below_the_prior():
    machine = NoisePrior.default()
    # Issue 41: the baseline's two search restarts 0.4% apart, the winner's one, and nothing else pooled.
    prior = study_prior([[3409.0, 3396.0], [3971.0]], machine)
    for values in ([3409.0, 3396.0], [3400.0, 3400.0], [3971.0], []):
        assert planning_noise(values, prior) >= prior.variance
    assert _cv(planning_noise([3400.0, 3400.0], prior)) > DEFAULT_CV * 0.9
    # Before the fix the same pair planned at CV 0%; now the plan line says where its CV came from.
    plan = plan_rounds(planning_noise([3971.0], prior), planning_noise([3409.0, 3396.0], prior),
                       search_effect=3971 / 3403, max_minutes=5.0, challenger_minutes=0.6, baseline_minutes=0.6,
                       noise_source=prior.source)
    assert plan.baseline_cv > 0.08 and plan.challenger_cv > 0.08
    assert "default 10%" in plan.describe() and "paired by round" in plan.describe()


def test_a_study_that_measured_a_quiet_machine_for_long_plans_below_the_default():
    rng = np.random.default_rng(0)
    groups = [list(1000 * np.exp(rng.normal(0, 0.02, 6))) for _ in range(10)]  # 50 degrees of freedom at 2%
    prior = study_prior(groups, NoisePrior.default())
    assert _cv(planning_noise(groups[0], prior)) < 0.06


def test_earlier_studies_on_the_machine_become_its_prior():
    quiet = NoisePrior.recorded([[1000, 1010, 990, 1005, 995, 1002]], "1 earlier study on GPU-X")
    assert quiet.cv < DEFAULT_CV and "earlier study on GPU-X" in quiet.source
    # One degree of freedom recorded is not worth a whole prior: the default fills the rest.
    thin = NoisePrior.recorded([[1000, 1001]], "1 earlier study")
    assert 0.5 * DEFAULT_CV < thin.cv < DEFAULT_CV


# -- 3. the analysis by round --------------------------------------------------------------------------------------


def test_the_h100_rounds_paired_resolve_the_win_welch_did_not():
    w = [float(a) for a, _ in H100_ROUNDS]
    b = [float(b) for _, b in H100_ROUNDS]
    c = compare_paired(w, b)
    assert c.verdict == Verdict.FASTER and c.pairs == 8
    assert c.speedup == pytest.approx(1.127, abs=0.001)
    assert c.ci_low == pytest.approx(1.03, abs=0.005) and c.ci_high == pytest.approx(1.24, abs=0.005)


def _drifting_rounds(rng, rounds, effect, level_sd=0.10, rho=0.8, own_sd=0.06):
    """A machine whose level wanders (AR(1) between rounds, both restarts of a round sharing it), each restart
    with its own noise: issue 41's H100 in shape."""
    level = rng.normal(0.0, level_sd)
    out = []
    for _ in range(rounds):
        level = rho * level + math.sqrt(1 - rho * rho) * rng.normal(0.0, level_sd)
        out.append((3000 * effect * math.exp(level + rng.normal(0, own_sd)), 3000 * math.exp(level + rng.normal(0, own_sd))))
    return out


def test_the_paired_analysis_holds_its_level_on_a_drifting_null_with_lost_restarts():
    rng = np.random.default_rng(41)
    draws, false = 2000, 0
    for _ in range(draws):
        rounds = _drifting_rounds(rng, int(rng.integers(4, 10)), 1.0)
        # Each side loses some restarts at random (a failure, a budget cut): only rounds both ran pair.
        w = [a for a, _ in rounds]
        b = [b for _, b in rounds]
        keep_w = rng.random(len(w)) > 0.15
        keep_b = rng.random(len(b)) > 0.3
        pairs = [(x, y) for x, y, kw, kb in zip(w, b, keep_w, keep_b) if kw and kb]
        if len(pairs) < 2:
            continue
        c = compare_paired([p[0] for p in pairs], [p[1] for p in pairs])
        false += c.verdict == Verdict.FASTER
    rate = false / draws
    assert rate <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / draws)  # one side of a 95% interval


def test_matched_pairs_pair_by_seed_and_skip_what_one_side_lost():
    from autotune.core.records import RestartResult

    def r(seed, value, ok=True):
        return RestartResult(status="ok" if ok else "failed", seed=seed, passes_tok_s=(value,) if ok else (),
                             error=None if ok else "boom")

    w = [r(0, 110.0), r(1, 120.0), r(2, 130.0), r(3, 140.0)]
    b = [r(0, 100.0), r(1, 0.0, ok=False), r(3, 100.0), r(4, 100.0)]
    a, c = matched_pairs(w, b)
    assert a == [110.0, 140.0] and c == [100.0, 100.0]


# -- a failing baseline still gives a verdict from what ran (issue 44, principle 8) ---------------------------------


def _pair(speedup: float, cv: float, fail_baseline_on=()):
    space = parse_space(SMALL_SPACE)
    winner = space.config_from_params(BETTER)
    base = space.baseline()

    def value(config, restart, seed):
        side = int(config.key() == winner.key())
        rng = np.random.default_rng([seed, side])
        return 1000.0 * (speedup if side else 1.0) * math.exp(float(rng.normal(0.0, cv)))

    fails: dict[str, int] = {"n": 0}

    def fail(config):
        if config.key() != base.key():
            return None
        fails["n"] += 1
        return "engine died (test)" if fails["n"] in fail_baseline_on else None

    engine = FakeEngine(value=value, fail=fail)
    return engine, [Candidate(CANDIDATE, winner), Candidate(BASELINE, base)], space.workload


def test_a_baseline_that_fails_a_third_of_its_restarts_still_gives_a_verdict_from_the_rounds_both_ran():
    engine, candidates, workload = _pair(1.3, 0.03, fail_baseline_on=(2, 5))
    v = run_verification(engine, workload, candidates, 6, seed_for=lambda r: r)
    base = v.baseline
    assert base.summary.n_failed == 2 and base.summary.n == 4
    c = v.winner.comparison
    assert c is not None and c.pairs == 4 and c.verdict == Verdict.FASTER
    assert v.answer(0.03) == Verdict.FASTER


def test_the_report_states_the_baselines_failures_beside_the_verdict(tmp_path):
    from autotune.report._rows import VerificationTable, VerifiedRow
    from autotune.report._verification_text import _failures_behind

    engine, candidates, workload = _pair(1.3, 0.03, fail_baseline_on=(2, 5))
    v = run_verification(engine, workload, candidates, 6, seed_for=lambda r: r)
    rows = tuple(VerifiedRow.from_verified(e) for e in v.entries)
    lines = _failures_behind(VerificationTable(rows, 6, v.restarts_used, v.minutes_used), 4)
    assert lines == ["the baseline failed 2 of its 6 verification restarts (engine died (test)); the verdict reads "
                     "the 4 rounds both sides ran"]
    # and the report has a result: the paired comparison is the measurement the verdict needs
    from autotune.report._counts import TrialCounts
    from autotune.report._no_result import no_result_reason

    winner = next(r for r in rows if not r.is_baseline)
    base = next(r for r in rows if r.is_baseline)
    assert base.status == "failed" and winner.speedup.pairs == 4
    assert no_result_reason(TrialCounts(), (), winner, base, True, rows) is None


@pytest.mark.parametrize("paired, starts", [(True, 6), (False, 8)])
def test_a_round_the_budget_cannot_pay_for_whole_is_left_out_when_paired(paired, starts):
    # Seven starts for four planned rounds of two (a start was lost after the plan, as to a worker killed mid-start):
    # paired, the fourth round's lone restart would count for nothing, so the round is not started; unpaired the round
    # is not held back (each restart counts alone; in a study the runner stops at the budget start by start).
    engine, candidates, workload = _pair(1.3, 0.03)
    v = run_verification(engine, workload, candidates, 4, seed_for=lambda r: r, paired=paired,
                         round_fits=lambda n: len(engine.calls) + n <= 7)
    assert len(engine.calls) == starts
    rounds = {e.candidate.role: sorted(r.restart for r in e.restarts) for e in v.entries}
    assert rounds[BASELINE] == rounds[CANDIDATE] == list(range(starts // 2))


def test_the_report_states_the_drift_the_study_saw_from_the_baselines_search_to_its_verification():
    import dataclasses

    from autotune.report._rows import VerificationTable, VerifiedRow
    from autotune.report._verification_text import _drift_lines

    engine, candidates, workload = _pair(1.13, 0.03)
    v = run_verification(engine, workload, candidates, 4, seed_for=lambda r: r)
    rows = [VerifiedRow.from_verified(e) for e in v.entries]
    # Issue 41's H100 study: the baseline 3403 tok/s in the search, the winner 3971.
    shifted = tuple(dataclasses.replace(r, search_mean=3403.0 if r.is_baseline else 3971.0,
                                        mean=2894.0 if r.is_baseline else 3270.0) for r in rows)
    (line,) = _drift_lines(VerificationTable(shifted, 4, v.restarts_used, v.minutes_used))
    assert line.startswith("machine drift: the baseline measured 15% lower in verification than in the search "
                           "(3403 -> 2894 tok/s), the challenger")
    assert "-18%" in line
    # Without the baseline's search restarts there is nothing to measure the move by.
    bare = tuple(dataclasses.replace(r, search_mean=None) for r in rows)
    assert _drift_lines(VerificationTable(bare, 4, v.restarts_used, v.minutes_used)) == []


# -- 7. the three-way answer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("speedup, cv, answer", [
    (1.3, 0.03, Verdict.FASTER),
    (1.0, 0.005, Verdict.EQUIVALENT),
    (1.04, 0.15, Verdict.UNDECIDED),
])
def test_the_answer_is_faster_equivalent_or_undecided_never_a_bare_no_difference(speedup, cv, answer):
    engine, candidates, workload = _pair(speedup, cv)
    v = run_verification(engine, workload, candidates, 4, seed_for=lambda r: r)
    assert v.answer(0.03) == answer


def test_a_baseline_that_wins_clearly_answers_slower():
    engine, candidates, workload = _pair(0.7, 0.03)
    v = run_verification(engine, workload, candidates, 4, seed_for=lambda r: r)
    assert v.winner.candidate.role == BASELINE and v.answer(0.03) == Verdict.SLOWER


# -- 4. what the budget can prove, before the first start --------------------------------------------------------


def test_the_budget_line_says_what_the_budget_proves_and_that_min_effect_is_out_of_reach():
    reach = budget_reach(math.log1p(0.1 ** 2), "default 10%", budget_minutes=30, budget_starts=None,
                         restart_minutes=1.0, min_effect=1.05)
    text = reach.describe()
    assert "at ~10% restart noise" in text and "30 minutes can prove about" in text
    assert not reach.in_reach and "out of reach" in text and "hours" in text
    more = budget_reach(math.log1p(0.1 ** 2), "default 10%", budget_minutes=600, budget_starts=None,
                        restart_minutes=1.0, min_effect=1.15)
    assert more.in_reach and more.resolvable < reach.resolvable


def test_tune_prints_the_budget_line_before_the_first_start(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    import yaml

    space.write_text(yaml.safe_dump({**SMALL_SPACE, "engine": {"name": "sim"}}))
    raw_main(["tune", "--space", str(space), "--engine", "sim", "--study", "reach", "--budget-restarts", "16",
              "--trials", "1", "--storage", f"sqlite:///{tmp_path}/o.db", "--workdir", str(tmp_path / "w"),
              "--no-mlflow"])
    text = capsys.readouterr().out
    first = text.splitlines()[0]  # before anything the study prints
    assert first.startswith("WARNING: budget: at ~10% restart noise (default 10%, no earlier study on this machine)")
    assert "--min-effect is out of reach" in first  # 16 starts resolve nothing near 1.05x


# -- 5. advice whose probability holds ---------------------------------------------------------------------------


def test_the_chance_of_a_decision_is_calibrated_under_its_own_model():
    # Effects drawn from the advice's prior, pairs from the effect: among open looks, the predicted chance that k
    # more rounds decide matches how often they do.
    rng = np.random.default_rng(5)
    var_d, n0, k, level = 0.02, 5, 5, 0.05
    from scipy import stats

    predicted, decided = [], []
    for _ in range(4000):
        delta = rng.normal(0.0, 0.15)
        d0 = list(rng.normal(delta, math.sqrt(var_d), n0))
        half0 = stats.t.isf(level / 2, n0 - 1) * math.sqrt(var_d / n0)
        if abs(np.mean(d0)) > half0:
            continue  # already decided: no advice is given
        predicted.append(decision_chance(d0, var_d, k, level, 0.03))
        d = d0 + list(rng.normal(delta, math.sqrt(var_d), k))
        half = stats.t.isf(level / 2, n0 + k - 1) * math.sqrt(var_d / (n0 + k))
        m = float(np.mean(d))
        decided.append(abs(m) > half or abs(m) + half < math.log1p(0.03))
    assert len(predicted) > 1000
    assert np.mean(predicted) == pytest.approx(np.mean(decided), abs=0.03)


def test_paired_power_matches_the_analysis():
    rng = np.random.default_rng(2)
    var_d, n, effect = 0.02, 8, 1.12
    hits = 0
    for _ in range(3000):
        d = rng.normal(math.log(effect), math.sqrt(var_d), n)
        c = compare_paired(list(np.exp(d)), [1.0] * n)
        hits += c.verdict == Verdict.FASTER
    assert hits / 3000 == pytest.approx(paired_power(n, var_d, effect, 0.05), abs=0.03)


def test_earlier_studies_on_the_same_store_and_machine_are_the_next_studys_prior(tmp_path):
    # Issue 41: the floor comes from "the machine's recorded noise (earlier studies on this store and GPU)".
    from autotune.study import StudyOptions, run_study
    from autotune.study._planning import machine_prior

    space = parse_space(SMALL_SPACE)
    storage = f"sqlite:///{tmp_path / 'o.db'}"
    gpu_x = EngineFacts(name="fake", gpu="GPU-X")
    engine = FakeEngine(lambda c: 1000.0 * (1.3 if c.num_speculative_tokens else 1.0), noise=0.02, facts=gpu_x)
    run_study(space, engine, StudyOptions(study_name="first", storage=storage, workdir=str(tmp_path), trials=4,
                                          top_k=1, verify_restarts=4, seed=0))
    later = StudyOptions(study_name="second", storage=storage, workdir=str(tmp_path))
    prior = machine_prior(None, later, encode(gpu_x))
    assert "1 earlier study on GPU-X" in prior.source and prior.cv < DEFAULT_CV
    other = machine_prior(None, later, encode(EngineFacts(name="fake", gpu="GPU-Y")))
    assert other.cv == pytest.approx(DEFAULT_CV) and "no earlier study" in other.source


# -- 3b. the rounds' variance moderated by the plan's prior ----------------------------------------------------------


def test_three_rounds_that_agree_by_luck_no_longer_give_a_narrow_wrong_interval():
    # Seed 32 of the simulator's drifting flat landscape (docs/benchmarks.md): a configuration 0.937x the baseline
    # measured 1.053x, 1.071x and 1.069x in its three rounds, where a round's log ratio varies by about 0.10.
    w, b = [1053.0, 1071.0, 1069.0], [1000.0, 1000.0, 1000.0]
    raw = compare_paired(w, b)
    assert raw.verdict == Verdict.FASTER  # two degrees of freedom of a lucky variance
    prior = PairPrior(2 * math.log1p(DEFAULT_CV ** 2), 4.0)
    moderated = compare_paired(w, b, prior=prior)
    assert moderated.verdict == Verdict.NOT_SIGNIFICANT and moderated.ci_low < 0.937 < moderated.ci_high
    assert moderated.speedup == pytest.approx(raw.speedup)  # the centre is the rounds' own


def test_many_rounds_outweigh_the_prior():
    rng = np.random.default_rng(7)
    d = rng.normal(math.log(1.1), 0.03, 60)
    w, b = list(1000 * np.exp(d)), [1000.0] * 60
    raw, moderated = compare_paired(w, b), compare_paired(w, b, prior=PairPrior(2 * 0.03 ** 2, 4.0))
    # Sixty rounds at sd 0.03 against a prior twice their variance, worth four rounds: the interval is the rounds'.
    width = (lambda c: math.log(c.ci_high / c.ci_low))
    assert 0.97 < width(moderated) / width(raw) < 1.06 and moderated.verdict == Verdict.FASTER
    # Three of them, which happen to agree closer than sd 0.03: the prior dominates and widens their interval.
    few = compare_paired(w[:3], b[:3], prior=PairPrior(2 * 0.03 ** 2, 4.0))
    assert few.verdict == Verdict.FASTER and width(few) > 1.5 * width(compare_paired(w[:3], b[:3]))


@pytest.mark.parametrize("prior_scale", [1.0, 2.0])
def test_the_moderated_analysis_holds_its_level_when_its_prior_is_right_or_too_wide(prior_scale):
    # The rounds' true log-ratio variance is drawn around the prior (as limma's model has it) or the prior is twice
    # the truth (a plan that gave the round's correlation no credit): false "faster" on a null at most 2.5%.
    rng = np.random.default_rng(11)
    prior_var, prior_df, draws, false = 0.015, 4.0, 4000, 0
    for _ in range(draws):
        true_var = prior_var * prior_df / rng.chisquare(prior_df) / prior_scale
        n = int(rng.integers(2, 8))
        d = rng.normal(0.0, math.sqrt(true_var), n)
        c = compare_paired(list(np.exp(d)), [1.0] * n, prior=PairPrior(prior_var, prior_df))
        false += c.verdict == Verdict.FASTER
    assert false / draws <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / draws)


def test_a_pair_prior_needs_a_positive_variance():
    with pytest.raises(ValueError, match="positive variance"):
        PairPrior(0.0, 4.0)


def test_a_study_stores_its_pair_prior_with_the_plan_and_its_verdict_reads_it(tmp_path):
    from autotune.study import StudyOptions, run_study

    space = parse_space(SMALL_SPACE)
    engine = FakeEngine(lambda c: 1000.0 * (1.3 if c.num_speculative_tokens else 1.0), noise=0.03)
    ledger = run_study(space, engine, StudyOptions(study_name="s", storage=f"sqlite:///{tmp_path / 'o.db'}",
                                                   workdir=str(tmp_path), budget_restarts=24, top_k=1, seed=0,
                                                   verify_planned=True))
    plan = ledger.verify_plan()
    assert plan is not None and plan.paired and plan.pair_prior is not None
    assert plan.pair_prior.df > 0 and "read with this prior" in plan.describe()
    v = ledger.verification()
    assert v is not None and v.plan is not None and v.plan.pair_prior == plan.pair_prior
    winner, base = v.winner, v.baseline
    assert winner.candidate.role != BASELINE and winner.comparison is not None
    a, b = matched_pairs(winner.restarts, base.restarts)
    level = 1.0 - winner.comparison.confidence
    if v.sequential is not None:
        level = 1.0 - v.sequential.nominal_confidence  # the look's nominal level (its stated one is the design's)
    moderated = compare_paired(a, b, alpha=level, prior=plan.pair_prior)
    raw = compare_paired(a, b, alpha=level)
    assert winner.comparison.ci_low == pytest.approx(moderated.ci_low)
    assert winner.comparison.ci_low != pytest.approx(raw.ci_low)


def test_the_planned_power_is_the_moderated_analysiss():
    # The plan counts the prior's degrees of freedom (paired_power's prior_df) because the analysis does.
    rng = np.random.default_rng(3)
    var_d, n, effect, hits = 0.02, 6, 1.12, 0
    prior = PairPrior(var_d, 4.0)
    for _ in range(3000):
        d = rng.normal(math.log(effect), math.sqrt(var_d), n)
        hits += compare_paired(list(np.exp(d)), [1.0] * n, prior=prior).verdict == Verdict.FASTER
    assert hits / 3000 == pytest.approx(paired_power(n, var_d, effect, 0.05, prior_df=4.0), abs=0.03)
    assert paired_power(n, var_d, effect, 0.05, prior_df=4.0) > paired_power(n, var_d, effect, 0.05) + 0.05
