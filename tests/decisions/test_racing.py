"""Racing and budgets: adaptive restarts, early stops through Optuna's pruner, matched seeds, budgets, samplers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from autotune.decisions.racing import Decision, Noise, RacingPolicy, RacingPruner, incumbent_values, pooled_noise
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.store.ledger import Ledger
from autotune.study import StudyOptions, run_study
from autotune.study._open import make_sampler
from tests._helpers.landscape import BEHIND, BETTER, CLOSE, INCUMBENT, ORDER, TRUTH, WORSE
from tests.conftest import SMALL_SPACE, FakeEngine, by_params


def cold_first_engine(true_mean, **kw) -> FakeEngine:
    """First start of each configuration cold: 40% slow and flagged, like the H200."""
    return FakeEngine(true_mean, cold_first=True, **kw)


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="race", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                trials=4, policy=RacingPolicy(min_restarts=2, max_restarts=6), verify=False, seed=0)
    base.update(kw)
    return StudyOptions(**base)


def _run_enqueued(tmp_path: Path, params: list[dict], engine: FakeEngine, **kw) -> Ledger:
    """A study that runs exactly ``params`` first, in order (pre-enqueued ahead of the baselines)."""
    options = _options(tmp_path, trials=len(params), **kw)
    study = optuna.create_study(study_name=options.study_name, storage=options.storage, direction="maximize")
    for p in params:
        study.enqueue_trial(p)
    return run_study(parse_space(SMALL_SPACE), engine, options)


def _by_params(ledger: Ledger, params: dict) -> optuna.trial.FrozenTrial:
    return next(t for t in ledger.study.trials if t.params == params)


# -- the policy ------------------------------------------------------------------------------------------


def test_policy_needs_min_restarts_before_completing():
    policy = RacingPolicy(min_restarts=2, max_restarts=6)
    assert policy.decide([10.0], [100.0, 101.0]) == Decision.MORE  # no noise estimate: one value says nothing
    assert policy.decide([200.0], [100.0, 101.0], Noise(sd=0.02, df=30)) == Decision.MORE  # better: confirm it
    assert policy.decide([10.0, 10.5], None) == Decision.COMPLETE  # nothing to race against yet


def test_policy_prunes_a_hopeless_trial_after_one_restart_once_the_noise_is_known():
    policy = RacingPolicy(min_restarts=2, max_restarts=6)
    assert policy.decide([60.0], [100.0, 101.0], Noise(sd=0.03, df=30)) == Decision.PRUNE
    assert policy.decide([95.0], [100.0, 101.0], Noise(sd=0.03, df=30)) == Decision.MORE


def test_policy_adds_restarts_only_to_a_challenger_ahead_of_the_incumbent():
    noise = Noise(sd=0.03, df=30)
    incumbent = [100.0, 101.0]
    assert RacingPolicy().decide([102.0, 103.0], incumbent, noise) == Decision.MORE
    assert RacingPolicy().decide([99.0, 100.0], incumbent, noise) == Decision.COMPLETE  # behind: a tie at best
    assert RacingPolicy(only_ahead=False).decide([99.0, 100.0], incumbent, noise) == Decision.MORE


def test_policy_prunes_completes_and_caps():
    policy = RacingPolicy(min_restarts=2, max_restarts=4, pooled=False)
    incumbent = [100.0, 101.0, 99.0, 100.5]
    assert policy.decide([40.0, 41.0], incumbent[:2]) == Decision.PRUNE
    assert policy.decide([200.0, 201.0], incumbent[:2]) == Decision.COMPLETE
    assert policy.decide([100.0, 102.0], incumbent[:2]) == Decision.MORE
    assert policy.decide([100.0, 102.0, 100.0, 101.0], incumbent) == Decision.COMPLETE  # at the cap


def test_policy_without_racing_never_prunes():
    policy = RacingPolicy(min_restarts=3, racing=False)
    assert policy.decide([1.0, 1.0, 1.0], [100.0, 101.0, 99.0]) == Decision.COMPLETE


# -- racing inside a study -------------------------------------------------------------------------------


@pytest.fixture()
def raced(tmp_path: Path) -> tuple[Ledger, FakeEngine]:
    engine = FakeEngine(by_params(TRUTH), noise=0.01)
    return _run_enqueued(tmp_path, ORDER, engine), engine


def test_a_clearly_worse_config_is_pruned_through_optuna(raced):
    study, _ = raced
    worse = _by_params(study, WORSE)
    assert worse.state == TrialState.PRUNED
    # Stopped after its first restart (the study's noise showed it hopeless), recorded as Optuna's own
    # intermediate value at step 0.
    assert sorted(worse.intermediate_values) == [0]
    assert worse.intermediate_values[0] < 50.0
    assert "raced out" in study.pruned_reason(worse)
    assert len(study.restarts(worse)) == 1


def test_a_close_config_stops_once_it_has_run_every_seed_of_the_incumbent(raced):
    study, _ = raced
    close = _by_params(study, CLOSE)
    incumbent = max((t for t in study.study.trials if t.state == TrialState.COMPLETE and t.number < close.number),
                    key=lambda t: t.value)
    assert close.state == TrialState.COMPLETE
    # Ahead and not shown better: it runs the incumbent's seeds, no more (the cap of 6 would allow more).
    assert sorted(close.intermediate_values) == sorted(incumbent.intermediate_values) == [0, 1]


def test_policy_stops_a_challenger_at_the_incumbents_restarts():
    noise = Noise(sd=0.03, df=30)
    ahead = [102.0, 103.0]
    assert RacingPolicy().decide(ahead, [100.0, 101.0], noise) == Decision.MORE  # no such cap: the old race
    assert RacingPolicy().decide(ahead, [100.0, 101.0], noise, incumbent_restarts=3) == Decision.MORE
    assert RacingPolicy().decide(ahead, [100.0, 101.0], noise, incumbent_restarts=2) == Decision.COMPLETE
    # min_restarts comes first: a one-restart incumbent does not stop a challenger before its min_restarts.
    assert RacingPolicy(min_restarts=2).decide([102.0], [100.0], noise, incumbent_restarts=1) == Decision.MORE


def test_a_close_config_behind_the_incumbent_stops_at_two_restarts(raced):
    study, _ = raced
    behind = _by_params(study, BEHIND)
    # 1% behind under 1% noise: the test on the difference may already call it worse; either way no third restart.
    assert behind.state in (TrialState.COMPLETE, TrialState.PRUNED)
    assert sorted(behind.intermediate_values) in ([0], [0, 1])


def test_a_clearly_better_config_stops_at_two_restarts(raced):
    study, _ = raced
    better = _by_params(study, BETTER)
    assert better.state == TrialState.COMPLETE
    assert sorted(better.intermediate_values) == [0, 1]
    assert better.value == pytest.approx(250.0, rel=0.05)


def test_every_trial_runs_the_same_seeds_in_the_same_order(raced):
    study, engine = raced
    seeds_by_config: dict[str, list[int]] = {}
    for key, seed in engine.calls:
        seeds_by_config.setdefault(key, []).append(seed)
    longest = max(seeds_by_config.values(), key=len)
    for seeds in seeds_by_config.values():
        assert seeds == longest[: len(seeds)]  # restart j of every trial ran seed j
    for t in study.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)):
        assert [r.seed for r in study.restarts(t)] == longest[: len(study.restarts(t))]


def _trial(values: list[float], state: TrialState = TrialState.COMPLETE) -> optuna.trial.FrozenTrial:
    return create_trial(
        params={"x": 0.0}, distributions={"x": FloatDistribution(0.0, 1.0)},
        value=sum(values) / len(values) if state == TrialState.COMPLETE else None,
        intermediate_values=dict(enumerate(values)), state=state,
    )


def test_incumbent_values_are_the_best_trials_first_n_restarts():
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial([80.0, 81.0, 79.0]))
    study.add_trial(_trial([100.0, 101.0, 99.0, 100.0]))
    assert incumbent_values(study, exclude_number=99) == [100.0, 101.0, 99.0, 100.0]
    assert incumbent_values(study, exclude_number=99, n=2) == [100.0, 101.0]
    assert incumbent_values(study, exclude_number=1, n=2) == [80.0, 81.0]  # a trial never races itself


def test_the_pruner_compares_on_matched_seeds():
    # The incumbent ran fast on seeds 0-1 and slow on 2-5. A challenger with two restarts is judged against the
    # incumbent's seeds 0-1 only: unmatched, the incumbent's wide interval would hide the gap.
    # (Own-spread intervals here: this incumbent's drift would dominate a pooled noise estimate.)
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial([100.0, 101.0, 20.0, 21.0, 20.5, 19.5]))
    challenger = _trial([60.0, 61.0], state=TrialState.RUNNING)
    policy = RacingPolicy(min_restarts=2, max_restarts=6, pooled=False)
    assert RacingPruner(policy).prune(study, challenger)
    unmatched = policy.decide([60.0, 61.0], [100.0, 101.0, 20.0, 21.0, 20.5, 19.5])
    assert unmatched != Decision.PRUNE


def _noisy_study(rel_sd: float, configs: int, restarts: int, seed: int = 0) -> optuna.Study:
    rng = np.random.default_rng(seed)
    study = optuna.create_study(direction="maximize")
    for i in range(configs):
        study.add_trial(_trial(list(100.0 * (1 + i) * np.exp(rng.normal(0.0, rel_sd, restarts)))))
    return study


def test_pooled_noise_recovers_the_restart_noise_from_every_trial():
    study = _noisy_study(rel_sd=0.05, configs=40, restarts=3)
    noise = pooled_noise(study, exclude_number=-1)
    assert noise is not None and noise.df == 40 * 2
    assert noise.sd == pytest.approx(0.05, rel=0.2)
    assert pooled_noise(optuna.create_study(), exclude_number=-1, current=[100.0]) is None  # nothing to pool yet


def test_pooled_noise_decides_at_two_restarts_what_a_trials_own_spread_cannot():
    # 4% restart noise, a challenger 25% above the incumbent: two restarts of each are plenty once the noise is
    # known from the rest of the study, but a two-restart interval of its own (t = 12.7 at one degree of freedom)
    # is too wide to call.
    study = _noisy_study(rel_sd=0.04, configs=10, restarts=3)
    incumbent, challenger = [1000.0, 1030.0], [1260.0, 1240.0]
    pooled = RacingPolicy()
    own = RacingPolicy(pooled=False)
    noise = pooled_noise(study, exclude_number=-1, current=challenger)
    assert pooled.decide(challenger, incumbent, noise) == Decision.COMPLETE
    assert own.decide(challenger, incumbent) == Decision.MORE
    slower = [800.0, 790.0]
    assert pooled.decide(slower, incumbent, pooled_noise(study, -1, slower)) == Decision.PRUNE
    assert own.decide(slower, incumbent) != Decision.PRUNE


# -- cold restarts ---------------------------------------------------------------------------------------


def test_cold_restarts_are_recorded_not_counted_and_rerun_warm_on_the_same_seed(tmp_path):
    engine = cold_first_engine(by_params(TRUTH), noise=0.01)
    study = _run_enqueued(tmp_path, ORDER, engine)
    screened = 0
    for t in study.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED)):
        restarts = study.restarts(t)
        assert restarts[0].cold and not any(r.cold for r in restarts[1:])
        assert len(t.intermediate_values) == len(restarts) - 1  # the cold start is never an observation
        if len(restarts) == 1:  # stopped on its cold start: the study's pairs showed it cannot be the best
            assert "screened on its cold start" in study.pruned_reason(t)
            screened += 1
            continue
        assert restarts[0].seed == restarts[1].seed
    # Racing decided on warm values exactly as without cold starts.
    assert _by_params(study, WORSE).state == TrialState.PRUNED
    assert sorted(_by_params(study, BETTER).intermediate_values) == [0, 1]
    assert _by_params(study, BETTER).value == pytest.approx(250.0, rel=0.05)
    # The report does not call a trial with no counted restart complete (this study screens at least one).
    assert screened >= 1
    counts = build_report(study).trials
    complete = [t for t in study.study.get_trials(states=(TrialState.COMPLETE,))]
    assert counts.screened == screened and counts.complete == len(complete) - screened
    assert (f"{screened} screened on their cold start" in render_report(build_report(study))) == bool(screened)


# -- budgets ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [18, 21, 25, 40])
@pytest.mark.parametrize("engine_cls", [FakeEngine, cold_first_engine])
def test_a_study_never_exceeds_its_restart_budget_verification_included(tmp_path, budget, engine_cls):
    options = _options(tmp_path, trials=200, verify=True, top_k=2, verify_restarts=3, budget_restarts=budget,
                       seed=budget)
    study = run_study(parse_space(SMALL_SPACE), engine_cls(by_params(TRUTH), noise=0.03), options)
    used, _ = study.budget_used()
    assert used <= budget
    assert study.verification() is not None  # the verification share was held back, not spent on search
    report = build_report(study)
    assert report.budget.verification_restarts == study.verification().restarts_used > 0
    assert f"of {budget}" in render_report(report) and "verification:" in render_report(report)


def test_a_minutes_budget_stops_the_study(tmp_path):
    options = _options(tmp_path, trials=200, verify=True, top_k=2, verify_restarts=2, budget_minutes=20.0)
    study = run_study(parse_space(SMALL_SPACE), FakeEngine(by_params(TRUTH)), options)  # 1 engine-minute a start
    used, minutes = study.budget_used()
    finished = [t for t in study.study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) < 200
    assert minutes <= 20.0 and used <= 20
    assert study.verification() is not None


# -- what the sampler is told ----------------------------------------------------------------------------


def test_gp_sampler_is_not_told_the_objective_is_deterministic():
    sampler, why = make_sampler("gp", seed=0)
    assert isinstance(sampler, optuna.samplers.GPSampler)
    assert sampler._deterministic is False
    assert "noisy" in why.lower()


def test_tpe_is_told_the_mean_of_matched_restarts_and_metadata_says_which_sampler(raced):
    study, _ = raced
    meta = study.meta()
    assert meta.sampler == "tpe" and "mean" in meta.sampler_why
    for t in study.study.trials:
        if t.state != TrialState.COMPLETE:
            continue
        warm = [t.intermediate_values[s] for s in sorted(t.intermediate_values)]
        assert t.value == pytest.approx(sum(warm) / len(warm))
        assert t.value == pytest.approx(study.summary(t).mean)


def test_gp_study_records_its_sampler(tmp_path):
    study = _run_enqueued(tmp_path, [INCUMBENT, BETTER], FakeEngine(by_params(TRUTH)), sampler="gp")
    assert study.meta().sampler == "gp"
    assert "deterministic_objective=False" in study.meta().sampler_why
    assert not math.isnan(study.study.best_value)
