"""Verification planned from the noise (issue 31): the plan's arithmetic, unequal restarts, the budget, the open verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.config.space import parse_space
from autotune.decisions.planning import NoiseEstimate, closing_restarts, estimate_noise, plan_restarts, power
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, round_participants, scheduled
from autotune.stats.intervals import Verdict, compare
from autotune.study import StudyOptions, run_study, run_verification
from tests.conftest import SMALL_SPACE, FakeEngine
from tests._helpers.landscape import BETTER


def _noise(cv: float) -> NoiseEstimate:
    return NoiseEstimate(math.log1p(cv * cv), 3)


def _draws(n: int, cv: float, mean: float, rng: np.random.Generator, size: int) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv * cv))
    return mean * np.exp(rng.normal(-sigma * sigma / 2, sigma, size=(size, n)))


# -- 1. the plan's arithmetic -----------------------------------------------------------------------------------


def test_the_worked_example_three_winner_restarts_against_five_of_the_noisy_baseline():
    # The H200 MoE study's noise: the winner 2% between restarts, the engine defaults 12%. Three a side cannot
    # resolve 1.23x (the arithmetic); the plan gives the steady winner three and the noisy baseline more.
    winner, baseline = _noise(0.02), _noise(0.12)
    assert power(3, 3, winner, baseline, 1.23, 0.05) < 0.5
    plan = plan_restarts(winner, baseline, min_effect=1.23, target_power=0.8)
    assert (plan.challenger, plan.baseline) == (3, 5) and plan.basis == "min-effect"
    # The fewest: one baseline restart less misses the power, and no cheaper split reaches it.
    assert power(3, 5, winner, baseline, 1.23, 0.05) >= 0.8 > power(3, 4, winner, baseline, 1.23, 0.05)
    assert all(power(c, 7 - c, winner, baseline, 1.23, 0.05) < 0.8 for c in range(3, 5))
    assert "3 winner + 5 baseline restarts planned, baseline CV 12%" in plan.describe()


def test_the_power_the_plan_computes_is_what_the_analysis_delivers():
    # The plan's noncentral t at the floored Welch degrees of freedom, against the analysis itself (compare) on
    # 4000 simulated verifications of each allocation.
    rng = np.random.default_rng(7)
    for n_c, n_b, effect in ((3, 5, 1.23), (3, 8, 1.15), (4, 4, 1.3)):
        w = _draws(n_c, 0.02, 1000.0 * effect, rng, 4000)
        b = _draws(n_b, 0.12, 1000.0, rng, 4000)
        found = np.mean([compare(w[i], b[i]).verdict == Verdict.FASTER for i in range(len(w))])
        planned = power(n_c, n_b, _noise(0.02), _noise(0.12), effect, 0.05)
        assert found == pytest.approx(planned, abs=0.05), (n_c, n_b, effect, found, planned)


def test_a_plan_the_budget_cannot_pay_says_what_it_resolves_and_the_search_effect_sizes_it():
    winner, baseline = _noise(0.02), _noise(0.12)
    # 1.05x at 12% noise needs far more than ten minutes of restarts: the search's 1.60x, discounted to its cube root.
    plan = plan_restarts(winner, baseline, search_effect=1.6, max_minutes=10.0, challenger_minutes=0.8,
                         baseline_minutes=0.8)
    assert plan.basis == "search" and plan.effect == pytest.approx(1.6 ** (1 / 3))
    assert plan.minutes is not None and plan.minutes <= 10.0 and plan.min_effect_needs is None
    # No search effect above the smallest one: what the budget pays for, and the effect it resolves.
    capped = plan_restarts(winner, baseline, search_effect=1.02, max_minutes=10.0, challenger_minutes=0.8,
                           baseline_minutes=0.8)
    assert capped.basis == "budget" and capped.minutes <= 10.0 and capped.baseline > capped.challenger
    assert capped.effect == capped.resolvable and 1.05 < capped.resolvable < 1.3
    assert "what the budget's share pays for" in capped.describe()


def test_one_restart_plans_on_the_studys_pooled_noise_not_on_none():
    prior = math.log1p(0.08 ** 2)
    one = estimate_noise([1000.0], prior)
    assert one.variance == pytest.approx(prior)  # nothing to learn from one restart: the prior
    two_alike = estimate_noise([1000.0, 1000.0], prior)
    assert 0 < two_alike.variance < prior  # two that agreed pull it down, not to zero


# -- 2. unequal restarts ----------------------------------------------------------------------------------------


def test_each_sides_restarts_are_spread_over_the_common_rounds_first_round_for_all():
    assert [r for r in range(8) if scheduled(3, 8, r)] == [0, 2, 5]
    assert [r for r in range(8) if scheduled(8, 8, r)] == list(range(8))
    space = parse_space(SMALL_SPACE)
    cands = [Candidate(CANDIDATE, space.config_from_params(BETTER)), Candidate(BASELINE, space.baseline())]
    who = [[c.role for c in round_participants(cands, {}, r, 3, 0.95, baseline_restarts=8) or ()]
           for r in range(8)]
    assert who[0] == [CANDIDATE, BASELINE] and who[2] == [CANDIDATE, BASELINE] and who[1] == [BASELINE]
    assert sum(CANDIDATE in w for w in who) == 3 and all(BASELINE in w for w in who)


def test_verification_runs_the_planned_counts_on_matched_seeds_and_compares_unequal_sides():
    space = parse_space(SMALL_SPACE)
    winner = space.config_from_params(BETTER)
    engine = FakeEngine(lambda c: 1300.0 if c.key() == winner.key() else 1000.0, noise=0.05)
    cands = [Candidate(CANDIDATE, winner), Candidate(BASELINE, space.baseline())]
    v = run_verification(engine, space.workload, cands, 3, lambda r: 500 + r, baseline_restarts=8)
    assert v.winner.summary.n == 3 and v.baseline.summary.n == 8 and v.verdict == Verdict.FASTER
    seeds = {key: [s for k, s in engine.calls if k == key] for key in (winner.key(), space.baseline().key())}
    assert seeds[winner.key()] == [500, 502, 505] and seeds[space.baseline().key()] == list(range(500, 508))


def test_the_interval_holds_its_level_with_unequal_restarts_and_unequal_noise():
    # Welch on logs with the floored degrees of freedom: the speedup interval covers the truth at least 95% of the
    # time with three restarts of a 2% side against eight of a 12% side, and the other way round.
    rng = np.random.default_rng(11)
    for (n_c, cv_c), (n_b, cv_b) in (((3, 0.02), (8, 0.12)), ((8, 0.12), (3, 0.02)), ((3, 0.12), (8, 0.12))):
        w, b = _draws(n_c, cv_c, 1200.0, rng, 4000), _draws(n_b, cv_b, 1000.0, rng, 4000)
        covered = np.mean([(c := compare(w[i], b[i])).ci_low <= 1.2 <= c.ci_high for i in range(len(w))])
        assert covered >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / 4000), (n_c, n_b, covered)


# -- 3. the budget ----------------------------------------------------------------------------------------------


def _study(tmp_path, name: str, budget: float, engine: FakeEngine, **kw):
    options = StudyOptions(study_name=name, storage=f"sqlite:///{tmp_path / 'o.db'}", workdir=str(tmp_path),
                           trials=50, top_k=1, seed=0, budget_minutes=budget, verify_planned=True, **kw)
    return run_study(parse_space(SMALL_SPACE), engine, options), options


def test_a_planned_study_never_overruns_its_budget_by_more_than_one_restart(tmp_path):
    # Restarts that grow longer as the study goes (a machine slowing down): every price the study made was too low.
    class Slowing(FakeEngine):
        def run_restart(self, config, workload, *, restart, seed):
            self.wall_s *= 1.04
            return super().run_restart(config, workload, restart=restart, seed=seed)

    engine = Slowing(lambda c: 1000.0 * (1.25 if c.num_speculative_tokens else 1.0), noise=0.10, wall_s=60.0)
    ledger, _ = _study(tmp_path, "slowing", 30.0, engine)
    longest = max(float(r.wall_s) for r in ledger.restarts_spent()) / 60.0
    assert ledger.budget_used()[1] <= 30.0 + longest
    assert ledger.verify_plan() is not None and ledger.verification() is not None


def test_the_plan_is_reserved_before_the_search_ends_and_stored_for_resumes(tmp_path):
    engine = FakeEngine(lambda c: 1000.0 * (1.3 if c.num_speculative_tokens else 1.0), noise=0.08, wall_s=60.0)
    ledger, _ = _study(tmp_path, "reserved", 16.0, engine)
    plan = ledger.verify_plan()
    v = ledger.verification()
    assert plan is not None and v is not None and v.plan == plan
    assert v.winner.summary.n >= plan.challenger and v.baseline.summary.n >= plan.baseline
    end = ledger.search_end()
    # The search stopped for the budget with the plan's minutes held back for verification.
    assert end is not None and "budget" in end.reason and end.verify_minutes is not None
    assert end.verify_minutes >= (plan.challenger + plan.baseline) * 1.0 - 1e-6


# -- 4. the open verdict ----------------------------------------------------------------------------------------


def test_an_open_verdict_says_why_and_what_closes_it_and_a_larger_budget_extends_it(tmp_path):
    from autotune.report._build import build_report
    from autotune.report._report import render_report

    # Every speculative configuration 8% faster under 10% restart noise, 16 minutes: the plan cannot resolve it.
    engine = FakeEngine(lambda c: 1000.0 * (1.08 if c.num_speculative_tokens else 1.0), noise=0.10, wall_s=60.0)
    ledger, options = _study(tmp_path, "open", 16.0, engine)
    report = build_report(ledger)
    assert report.verdict == Verdict.UNDECIDED and not report.winner_is_baseline
    note = report.to_json()["verification"]["no_sequential"]
    # Issue 41: the paired plan's note says what the rounds showed and the chance more rounds decide it.
    assert note.startswith("Undecided: ") and note in render_report(report)
    assert "rounds paired" in note and "chance of a decision" in note
    first = ledger.verification()
    assert first.sequential is not None and first.sequential.stopped == "the budget ran out"
    if "--budget-minutes" in note:
        wanted = int(note.split("--budget-minutes ")[1].split(".")[0].split()[0])
        assert wanted > 16
    # The same command with a larger budget runs more rounds of the same design and concludes again.
    ledger2, _ = _study(tmp_path, "open", 40.0, engine)
    again = ledger2.verification()
    assert again.extension == 1 and ledger2.verify_extension() == 1
    assert again.winner.summary.n > first.winner.summary.n and again.baseline.summary.n > first.baseline.summary.n
    assert again.sequential is not None and again.sequential.look > 1
    assert again.winner.comparison.confidence == pytest.approx(0.95)  # the design's level over every look
    assert ledger2.budget_used()[1] <= 40.0 + 1.0 + 1e-6


def test_closing_restarts_estimates_more_restarts_on_the_noisier_side():
    extra = closing_restarts([4420.0, 4314.0, 4276.0], [3961.0, 3499.0, 3155.0], 0.05)
    assert extra is not None and extra[1] >= extra[0]
    assert closing_restarts([1000.0, 1001.0, 999.0], [1000.0, 1000.5, 999.5], 0.05) is None  # no effect to close
