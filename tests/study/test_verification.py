"""Verification: the best configurations and the baseline again, in fresh interleaved restarts on fresh seeds."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.records import decode, encode
from autotune.stats.intervals import interval
from autotune.study.options import VERIFY_SEED_OFFSET
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_verification
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, first_round_cut
from tests.conftest import SMALL_SPACE, FakeEngine, by_params
from tests._helpers.landscape import BEHIND, BETTER, CLOSE, TRUTH


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
    from autotune.study._budget import _verify_top_k, minimum_plan

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

    from autotune.store.ledger import Ledger
    from autotune.core.records import RestartResult

    ledger = Ledger(optuna.create_study(direction="maximize"), create=True)
    trial = ledger.study.ask()
    restarts = [RestartResult(status="ok", seed=0, passes_tok_s=(100.0,), cold=True, wall_s=180.0)]
    if warm_minutes is not None:
        restarts.append(RestartResult(status="ok", seed=0, passes_tok_s=(100.0,), wall_s=warm_minutes * 60.0))
    ledger.record_restarts(trial, restarts)
    ledger.study.tell(trial, 100.0)
    return ledger


# -- the runner-up ---------------------------------------------------------------------------------------


def _runner_up_pair(space, leader_search, runner_search):
    """CLOSE (truly 101) as the search's leader and BETTER (truly 250) as the runner-up, with the given search means."""
    leader = Candidate(CANDIDATE, space.config_from_params(CLOSE), 3, leader_search, leader_search,
                       search_values=(leader_search,))
    runner = Candidate(CANDIDATE, space.config_from_params(BETTER), 4, runner_search, runner_search,
                       search_values=(runner_search,), runner_up=True)
    return [leader, runner, Candidate(BASELINE, space.baseline())]


def _verify_pair(leader_search, runner_search, **engine):
    """:func:`_runner_up_pair` verified in three rounds on a FakeEngine (1% noise unless ``engine`` says)."""
    space = parse_space(SMALL_SPACE)
    engine = FakeEngine(by_params(TRUTH), **{"noise": 0.01, **engine})
    verification = run_verification(engine, space.workload, _runner_up_pair(space, leader_search, runner_search),
                                    restarts=3, seed_for=lambda r: VERIFY_SEED_OFFSET + r)
    return verification, engine


def test_a_runner_up_that_is_ahead_on_search_and_first_round_restarts_takes_the_slot_and_can_win():
    # The search saw the leader lucky (300 against its true 101) and the runner-up at 240: the first round's fresh
    # restarts (about 101 and 250) turn the order round, so the leader is the one dropped.
    verification, engine = _verify_pair(300.0, 240.0)
    leader, runner, base = verification.entries
    assert leader.dropped and len(leader.summary.values) == 1 and leader.comparison is None
    assert not runner.dropped and len(runner.summary.values) == 3 and runner.comparison is not None
    assert len(base.summary.values) == 3
    assert verification.winner is runner and verification.verdict == "faster"
    assert len(engine.calls) == 1 + 3 + 3, "the dropped challenger ran the first round only"
    # The comparison is Bonferroni over the challengers that went on: one.
    assert runner.comparison.comparisons == 1


def test_a_dropped_challenger_cannot_win_even_with_the_highest_fresh_mean():
    # The runner-up (truly 250) was seen at 60 in the search, the leader (101) at 200: on search and first round
    # together (about 122 against 142) the runner-up is lowest, so it is dropped, and the winner is the leader
    # although the runner-up's one fresh restart is far higher.
    verification, _ = _verify_pair(200.0, 60.0)
    leader, runner, _ = verification.entries
    assert runner.dropped and runner.summary.mean > leader.summary.mean
    assert verification.winner is leader


def test_without_a_runner_up_every_challenger_runs_every_common_round():
    space = parse_space(SMALL_SPACE)
    candidates = [dataclasses.replace(c, runner_up=False) for c in _runner_up_pair(space, 300.0, 240.0)]
    assert first_round_cut(candidates, {}) == candidates[:2]
    verification = run_verification(FakeEngine(by_params(TRUTH), noise=0.01), space.workload, candidates, restarts=3,
                                    seed_for=lambda r: VERIFY_SEED_OFFSET + r)
    assert [len(e.summary.values) for e in verification.entries] == [3, 3, 3]
    assert not any(e.dropped for e in verification.entries)


def test_a_runner_up_whose_first_round_failed_is_the_one_dropped():
    better = parse_space(SMALL_SPACE).config_from_params(BETTER)
    verification, _ = _verify_pair(100.0, 400.0, fail=lambda c: "boom" if c.key() == better.key() else None)
    leader, runner, _ = verification.entries
    assert runner.dropped and not leader.dropped and verification.winner is leader
    assert len(leader.summary.values) == 3


def test_a_study_verifies_a_runner_up_for_one_round_and_the_report_says_it_was_dropped(tmp_path):
    from autotune.report._build import build_report
    from autotune.report._report import render_report
    from autotune.study import run_study

    space = parse_space(SMALL_SPACE)
    options = StudyOptions(study_name="runner-up", storage=f"sqlite:///{tmp_path / 'o.db'}", workdir=str(tmp_path),
                           trials=6, top_k=1, verify_restarts=3, verify_sequential_rounds=0, seed=0)
    ledger = run_study(space, FakeEngine(by_params(TRUTH), noise=0.02), options)
    entries = ledger.verification().entries
    challengers = [e for e in entries if e.candidate.role == CANDIDATE]
    assert len(challengers) == 2 and sum(e.candidate.runner_up for e in challengers) == 1
    assert sorted(len(e.summary.values) for e in challengers) == [1, 3]
    dropped = next(e for e in challengers if e.dropped)
    assert ledger.verification().winner is not dropped
    text = render_report(build_report(ledger))
    assert f"{dropped.candidate.config.label()}" in text and "dropped after round 1" in text


def test_the_study_verifies_with_the_loop_the_coverage_benchmark_scores(tmp_path):
    # bench/coverage.py scores run_verification: it must be the phase a study runs, round for round. Two
    # challengers tied on the truth get near-tie rounds; the runner-up gets its first round and is cut.
    from autotune.study import run_study, run_verification

    tied = {("FULL_AND_PIECEWISE", 1): 250.0, ("PIECEWISE", 1): 249.0, ("FULL_AND_PIECEWISE", 0): 200.0}
    space = parse_space(SMALL_SPACE)
    options = StudyOptions(study_name="same-loop", storage=f"sqlite:///{tmp_path / 'o.db'}", workdir=str(tmp_path),
                           trials=6, top_k=2, verify_restarts=3, verify_max_restarts=6, seed=0,
                           enqueue=(BETTER, BEHIND, CLOSE))
    study_engine = FakeEngine(by_params(tied), noise=0.03)
    ledger = run_study(space, study_engine, options)
    stored = ledger.verification()
    assert max(len(e.summary.values) for e in stored.entries) > options.verify_restarts  # near-tie rounds ran
    assert any(e.dropped for e in stored.entries)  # and a runner-up was cut

    engine = FakeEngine(by_params(tied), noise=0.03)
    again = run_verification(engine, space.workload, ledger.verify_candidates(), options.verify_restarts,
                             options.verify_seed, confidence=options.confidence,
                             interval_method=options.interval_method, max_restarts=options.verify_max_restarts,
                             sequential_rounds=options.verify_sequential_rounds, margin=options.verify_margin,
                             order_seed=options.seed)  # the study draws each round's order from its seed
    verify_seeds = {options.verify_seed(r)
                    for r in range(options.verify_max_restarts + options.verify_sequential_rounds)}
    assert engine.calls == [c for c in study_engine.calls if c[1] in verify_seeds]
    assert encode(again) == encode(stored)


def test_rounds_read_from_the_stored_shapes_keep_each_restart_in_the_round_it_was_run_for():
    from autotune.core.records import RestartResult
    from autotune.decisions.verification import Rounds

    def ok(seed, cold=False):
        return RestartResult(status="ok", restart=0, seed=seed, passes_tok_s=(100.0,), cold=cold)

    failed = RestartResult.failure("failed", "boom", restart=1, seed=2)
    # What a single-process autotune of an earlier version stored: config key -> restart dicts, in the order run.
    legacy = {"a": [encode(ok(1, cold=True)), encode(ok(1)), encode(ok(2))], "b": [encode(ok(1)), encode(failed)]}
    rounds = Rounds.from_progress({k: [decode(RestartResult, d) for d in v] for k, v in legacy.items()})
    assert rounds.round(0) == {"a": [ok(1, cold=True), ok(1)], "b": [ok(1)]}  # a cold start belongs to its round
    assert rounds.round(1) == {"a": [ok(2)], "b": [failed]}
    assert rounds.failed() == {"b"}
    # What the rounds' claims store: round -> config key -> restart dicts; read after the legacy ones.
    both = rounds.merged(Rounds.from_stored({1: {"a": [encode(ok(3))]}, 2: {"a": [encode(ok(4))]}}))
    assert both.progress() == {"a": [ok(1, cold=True), ok(1), ok(2), ok(3), ok(4)], "b": [ok(1), failed]}
    assert rounds.round(2) == {}  # merging made a new Rounds
