"""Verification: the best configurations and the baseline again, in fresh interleaved restarts on fresh seeds."""

from __future__ import annotations

import pytest

from autotune.measure import interval
from autotune.options import VERIFY_SEED_OFFSET
from autotune.space import parse_space
from autotune.study import StudyOptions
from autotune.verify import BASELINE, CANDIDATE, Candidate, run_verification
from tests.conftest import SMALL_SPACE, FakeEngine, by_params
from tests.test_racing import BEHIND, BETTER, CLOSE, TRUTH


def test_verification_reruns_a_cold_start_warm_and_counts_it_in_its_cost():
    space = parse_space(SMALL_SPACE)
    engine = FakeEngine(by_params(TRUTH), noise=0.01, cold_first=True)
    candidates = [Candidate(CANDIDATE, space.config_from_params(BETTER)), Candidate(BASELINE, space.baseline())]
    verification = run_verification(engine, space.workload, candidates, restarts=3,
                                    seed_for=lambda r: VERIFY_SEED_OFFSET + r)
    for entry in verification.entries:
        assert entry.summary.n == 3 and entry.summary.n_cold == 1
        assert entry.restarts[0].cold and entry.restarts[0].seed == entry.restarts[1].seed
    assert verification.restarts_used == 2 * (3 + 1)
    assert verification.winner.summary.mean == pytest.approx(250.0, rel=0.05)  # not dragged down by the cold start


@pytest.mark.parametrize(("budget", "top_k"), [(None, 3), (20, 1), (30, 1), (59, 1), (60, 2), (119, 3), (500, 3)])
def test_the_verification_share_scales_with_the_restart_budget(budget, top_k):
    options = StudyOptions(study_name="s", budget_restarts=budget)
    assert options.verify_top_k == top_k
    assert options.verify_reserve == (top_k + 1) * options.verify_restarts
    assert StudyOptions(study_name="s", budget_restarts=budget, top_k=5).verify_top_k == 5  # explicit wins


def test_verified_intervals_hold_for_the_whole_family_the_winner_included():
    space = parse_space(SMALL_SPACE)
    engine = FakeEngine(by_params(TRUTH), noise=0.03)
    candidates = [Candidate(CANDIDATE, space.config_from_params(p)) for p in (CLOSE, BEHIND, BETTER)]
    candidates.append(Candidate(BASELINE, space.baseline()))
    verification = run_verification(engine, space.workload, candidates, restarts=3,
                                    seed_for=lambda r: VERIFY_SEED_OFFSET + r)
    for entry in verification.entries:
        low, high = interval(entry.summary.values, 1 - 0.05 / 4)
        assert (entry.summary.ci_low, entry.summary.ci_high) == pytest.approx((low, high))
