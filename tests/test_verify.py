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


def test_under_a_minutes_budget_verification_scales_with_the_starts_it_buys(tmp_path):
    from autotune.study import _verify_top_k, minimum_plan

    space = parse_space(SMALL_SPACE)
    ledger = _ledger_with_starts(tmp_path, warm_minutes=0.5)
    # 20 minutes at half a minute per warm start buy 40 starts: one configuration, as a 40-start budget would.
    assert _verify_top_k(ledger, StudyOptions(study_name="s", budget_minutes=20)) == 1
    assert _verify_top_k(ledger, StudyOptions(study_name="s", budget_minutes=45)) == 3  # 90 starts
    assert _verify_top_k(ledger, StudyOptions(study_name="s", budget_minutes=45, top_k=2)) == 2  # explicit wins
    assert _verify_top_k(ledger, StudyOptions(study_name="s")) == 3  # no budget: as before
    # Before any start is priced: one, the least that lets the study claim anything.
    empty = _ledger_with_starts(tmp_path / "empty", warm_minutes=None)
    assert _verify_top_k(empty, StudyOptions(study_name="s", budget_minutes=600)) == 1
    # The smallest minutes budget is priced with one verified configuration, not three.
    minutes = minimum_plan(space, StudyOptions(study_name="s", budget_minutes=5))
    restarts = minimum_plan(space, StudyOptions(study_name="s", budget_restarts=400))
    assert len(restarts) - len(minutes) == 2 * 3, "two more verified configurations x three rounds"


def _ledger_with_starts(path, warm_minutes):
    """A study whose one trial ran a 3-minute cold start and, with ``warm_minutes``, a warm restart."""
    import optuna

    from autotune.ledger import Ledger
    from autotune.records import RestartResult

    ledger = Ledger(optuna.create_study(direction="maximize"), create=True)
    trial = ledger.study.ask()
    restarts = [RestartResult(status="ok", seed=0, passes_tok_s=(100.0,), cold=True, wall_s=180.0)]
    if warm_minutes is not None:
        restarts.append(RestartResult(status="ok", seed=0, passes_tok_s=(100.0,), wall_s=warm_minutes * 60.0))
    ledger.record_restarts(trial, restarts)
    ledger.study.tell(trial, 100.0)
    return ledger
