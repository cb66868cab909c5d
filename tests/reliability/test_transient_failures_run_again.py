"""Issue 32, principle 4: a restart killed by the memory guard (or lost with the forkserver host) is run again,
within the budget, before its configuration loses its place: in the search and in verification alike. The baseline
never silently loses verification."""

from __future__ import annotations

from autotune.config.space import parse_space
from autotune.core.records import RestartResult
from autotune.decisions.verification import Rounds
from autotune.machine import GUARD_PREFIX
from autotune.report._build import build_report
from autotune.study import run_study
from autotune.study.options import SEED_STRIDE, VERIFY_SEED_OFFSET
from tests._helpers.transient import TRIP, speed, study_options
from tests.conftest import SMALL_SPACE, FakeEngine

LOST = "restart lost: the forkserver host exited with status -9 before it reported the restart"


class TripsOnce(FakeEngine):
    """A fake engine whose chosen starts fail transiently once each (a passing memory burst on a shared host).

    ``when(config, seed)`` says whether a start is one of them; only the first such start of each (config, seed)
    fails with ``error``.
    """

    def __init__(self, *args, when, error: str = TRIP, **kw) -> None:
        super().__init__(*args, **kw)
        self.when, self.error, self.tripped = when, error, set()

    def run_restart(self, config, workload, *, restart, seed):
        if self.when(config, seed) and (config.key(), seed) not in self.tripped:
            self.tripped.add((config.key(), seed))
            self.calls.append((config.key(), seed))
            return RestartResult.failure("failed", self.error, restart=restart, seed=seed, wall_s=7.0)
        return super().run_restart(config, workload, restart=restart, seed=seed)


def _verify_seed(seed: int) -> bool:
    return seed % SEED_STRIDE >= VERIFY_SEED_OFFSET


def test_a_guard_trip_on_the_baselines_first_verification_restart_is_run_again_and_the_verdict_stands(tmp_path):
    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    first_round = study_options(tmp_path).verify_seed(0)
    engine = TripsOnce(speed, when=lambda c, seed: c.key() == base and seed == first_round)
    ledger = run_study(space, engine, study_options(tmp_path))
    report = build_report(ledger)
    assert engine.tripped == {(base, first_round)}
    # The killed start was run once more on the same seed, and the study has its verdict.
    assert engine.calls.count((base, first_round)) == 2
    # The same verdict, winner and verified values as the same study on a host where nothing tripped.
    calm_ledger = run_study(space, FakeEngine(speed), study_options(tmp_path / "calm"))
    calm = build_report(calm_ledger)
    assert report.no_result is None and calm.no_result is None and report.verdict == calm.verdict
    assert report.winner.config.key() == calm.winner.config.key()
    baseline = ledger.verification().baseline
    assert baseline.summary.status == "ok"
    assert baseline.summary.values == calm_ledger.verification().baseline.summary.values
    # The trip stays in the record (and the report names it), it is only not a failure of the configuration.
    assert [r.ok for r in baseline.restarts][:2] == [False, True]
    assert any(n.what.startswith(GUARD_PREFIX) for n in report.machine.guard_trips)


def test_a_lost_restart_in_the_search_is_run_again_before_the_trial_fails(tmp_path):
    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    engine = TripsOnce(speed, when=lambda c, seed: c.key() == base and not _verify_seed(seed), error=LOST)
    ledger = run_study(space, engine, study_options(tmp_path))
    report = build_report(ledger)
    assert len(engine.tripped) == 1
    calm = build_report(run_study(space, FakeEngine(speed), study_options(tmp_path / "calm")))
    assert report.no_result is None and report.verdict == calm.verdict
    assert report.winner.config.key() == calm.winner.config.key()
    first = next(t for t in ledger.study.trials if ledger.config_key(t) == base)
    assert first.state.name == "COMPLETE" and [r.ok for r in ledger.restarts(first)][:2] == [False, True]


def test_a_transient_failure_is_not_a_broken_configuration_in_verification_rounds():
    rounds = Rounds()
    trip = RestartResult.failure("failed", TRIP, restart=0, seed=1)
    lost = RestartResult.failure("failed", LOST, restart=0, seed=1)
    broken = RestartResult.failure("failed", "RuntimeError: engine rejected the configuration", restart=0, seed=1)
    ok = RestartResult(status="ok", restart=0, seed=1, passes_tok_s=(100.0, 100.0))
    rounds.add(0, "tripped", [trip, ok])
    rounds.add(0, "lost", [lost])
    rounds.add(0, "broken", [broken])
    assert rounds.failed() == {"broken"}
    # Two trips of the floor make a configuration infeasible: then it gets no more starts either.
    rounds.add(1, "tripped", [trip])
    assert rounds.failed() == {"broken", "tripped"}


def test_a_study_that_lost_its_baseline_to_a_guard_trip_recovers_when_the_same_command_runs_again(tmp_path,
                                                                                                  monkeypatch):
    """A study concluded with its baseline lost to one guard trip (by autotune before this rule, which never ran
    the restart again, or when the budget then had no room) is not final: the same command runs the missing
    restarts and concludes again, with the verdict the calm study has."""
    from autotune.study import _verification

    space = parse_space(SMALL_SPACE)
    base = space.baseline().key()
    first_round = study_options(tmp_path).verify_seed(0)
    engine = TripsOnce(speed, when=lambda c, seed: c.key() == base and seed == first_round)
    with monkeypatch.context() as m:
        m.setattr(_verification, "_may_run_again", lambda *a: False)  # as autotune before issue 32 did
        m.setattr(_verification.Rounds, "failed", _failed_before_issue_32)
        # and as before issue 44 (principle 8): a baseline that failed got no more starts
        m.setattr(_verification, "_baseline_broken", lambda results: True)
        lost = build_report(run_study(space, engine, study_options(tmp_path)))
    assert lost.no_result and "baseline" in lost.no_result and GUARD_PREFIX in lost.no_result
    calls = len(engine.calls)
    ledger = run_study(space, engine, study_options(tmp_path))  # the same command again
    report = build_report(ledger)
    calm = build_report(run_study(space, FakeEngine(speed), study_options(tmp_path / "calm")))
    assert report.no_result is None and report.verdict == calm.verdict
    # Concluded again as the study concludes: by round (a redo once fell back to Welch on pooled restarts).
    redone = ledger.verification()
    assert redone is not None and redone.winner.comparison is not None and redone.winner.comparison.pairs
    assert report.winner.config.key() == calm.winner.config.key()
    # It ran the baseline's missing restarts only: its first round again, and the round it was left out of.
    assert [key for key, _ in engine.calls[calls:]] == [base, base]
    # A third run has nothing to recover and starts nothing.
    run_study(space, engine, study_options(tmp_path))
    assert len(engine.calls) == calls + 2


def _failed_before_issue_32(self) -> set[str]:
    return {key for by_key in self.by_round.values() for key, results in by_key.items()
            if any(not r.ok for r in results)}


def test_a_configuration_the_floor_made_infeasible_in_verification_gets_no_more_starts_and_cannot_win(tmp_path,
                                                                                                     monkeypatch):
    """One floor hit in the search (run again, fine) and one in verification make two: the floor rule's infeasible
    configuration is not run again, in that round or any later one, and is not the winner however fast it ran."""
    from autotune.study import _verification

    # No runner-up (it would be cut after the first round and hide the rule): as when the budget has no start for it.
    monkeypatch.setattr(_verification, "_runner_up_starts", lambda ledger: [(None, False)] * 10_000)
    space = parse_space(SMALL_SPACE)
    best = {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 2,
            "draft": "ngram"}
    key = space.config_from_params(best).key()
    options = study_options(tmp_path, enqueue=(best,), budget_restarts=1_000, verify_restarts=3)
    search0, verify0 = options.search_seed(0), options.verify_seed(0)
    engine = TripsOnce(speed, when=lambda c, seed: c.key() == key and seed in (search0, verify0))
    report = build_report(run_study(space, engine, options))
    assert engine.tripped == {(key, search0), (key, verify0)}
    assert engine.calls.count((key, search0)) == 2  # the search's hit was run again
    assert [seed for k, seed in engine.calls if k == key and _verify_seed(seed)] == [verify0]  # nothing after
    assert report.winner.config.key() != key
