"""Why the search stopped (issue 21, item 4): decided where it happens, stored, and said with the numbers by the
report, ``--json`` and a resumed study that goes straight to verification."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.records import decode, encode
from autotune.config.space import Infeasible, SearchSpace, parse_space
from autotune.decisions.racing import RacingPolicy
from autotune.observers.progress import ProgressPrinter
from autotune.report._build import build_report
from autotune.store import ledger as ledger_mod
from autotune.store.ledger import CLAIMS_SUFFIX
from autotune.store.search_end import BUDGET, CONVERGED, INFEASIBLE, INTERRUPTED, TRIALS, SearchEnd
from autotune.study import Interrupted, StudyOptions, _optimize, run_study
from tests.conftest import SMALL_SPACE, FakeEngine

TRUTH = lambda c: 100.0 + 20 * c.num_speculative_tokens  # noqa: E731 - the fake engine's true means


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="e", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"), trials=4,
                policy=RacingPolicy(min_restarts=1, racing=False), top_k=1, verify_restarts=2, seed=3, verify=False)
    base.update(kw)
    return StudyOptions(**base)


def _said(report) -> str:
    line = next(x for x in report.render().splitlines() if x.startswith("Search ended: "))
    assert report.to_json()["search_end"]["text"] == line[len("Search ended: "):-1], "text and --json say the same"
    return line


def test_a_search_that_reached_its_trial_count_says_so(tmp_path):
    report = build_report(run_study(parse_space(SMALL_SPACE), FakeEngine(TRUTH), _options(tmp_path)))
    assert report.search_end.reason == TRIALS and report.search_end.trials_done == 4
    assert "trials reached: 4 of 4 trials done" in _said(report)


def test_a_minutes_budget_says_what_was_left_and_what_verification_needed(tmp_path):
    options = _options(tmp_path, trials=200, verify=True, top_k=1, verify_restarts=2, budget_minutes=14.0)
    report = build_report(run_study(parse_space(SMALL_SPACE), FakeEngine(TRUTH, wall_s=60.0), options))
    end = report.search_end
    assert end.reason == BUDGET and end.trials_done < 200
    assert end.verify_starts == 4 and end.verify_minutes == pytest.approx(4.0)  # 2 configs x 2 restarts at 1 min
    # It stopped because one more trial did not fit next to verification's share, and not before.
    left = end.budget_minutes - end.minutes_used
    assert end.verify_minutes + end.next_minutes > left >= end.verify_minutes
    line = _said(report)
    assert f"{end.minutes_used:.1f} of 14 engine-minutes used, {left:.1f} left" in line
    assert "verification needs 4 starts (~4.0 min)" in line and f"{end.trials_done} of 200 trials done" in line


def test_a_restart_budget_says_the_starts_used_and_left(tmp_path):
    options = _options(tmp_path, trials=200, verify=True, budget_restarts=12)
    report = build_report(run_study(parse_space(SMALL_SPACE), FakeEngine(TRUTH), options))
    end = report.search_end
    assert end.reason == BUDGET and end.budget_restarts == 12 and end.verify_starts == 4
    assert end.starts_used + end.verify_starts + end.next_starts > 12
    assert f"{end.starts_used} of 12 engine starts used" in _said(report)


def test_a_sampler_that_only_repeats_itself_has_converged(tmp_path, monkeypatch):
    monkeypatch.setattr(_optimize, "MAX_IDLE_SUGGESTIONS", 8)  # the rule, not its constant, is under test
    # Two configurations, both baselines: once they are measured, every suggestion repeats one.
    tiny = {**SMALL_SPACE, "search": {**SMALL_SPACE["search"], "cudagraph_mode": ["NONE"],
                                      "num_speculative_tokens": {"low": 0, "high": 1}}}
    report = build_report(run_study(parse_space(tiny), FakeEngine(TRUTH), _options(tmp_path, trials=100)))
    assert report.search_end.reason == CONVERGED and report.search_end.trials_done < 100
    assert "converged: 8 suggestions in a row were repeats" in _said(report)


def test_a_space_whose_suggestions_are_all_infeasible_says_so(tmp_path, monkeypatch):
    original = SearchSpace.suggest

    def suggest(self, trial):
        if trial.number < 2:  # the baselines
            return original(self, trial)
        raise Infeasible("ruled out by the space's constraints")

    monkeypatch.setattr(SearchSpace, "suggest", suggest)
    monkeypatch.setattr(_optimize, "MAX_IDLE_SUGGESTIONS", 8)
    report = build_report(run_study(parse_space(SMALL_SPACE), FakeEngine(TRUTH), _options(tmp_path, trials=50)))
    assert report.search_end.reason == INFEASIBLE
    assert "all candidates infeasible: 8 suggestions in a row were infeasible" in _said(report)


def test_an_interrupted_search_says_so_and_the_resume_stores_its_own_end(tmp_path):
    space, options = parse_space(SMALL_SPACE), _options(tmp_path, trials=5)
    with pytest.raises(Interrupted):
        run_study(space, FakeEngine(TRUTH, interrupt_after=2), options)
    end = ledger_mod.load("e", options.storage).search_end()
    assert end.reason == INTERRUPTED and end.trials_done == 2
    assert end.describe() == "interrupted by user (Ctrl-C) (2 of 5 trials done; the same command resumes)"
    report = build_report(run_study(space, FakeEngine(TRUTH), options))
    assert report.search_end.reason == TRIALS


def test_a_resumed_study_that_goes_straight_to_verification_prints_why_with_the_numbers(tmp_path):
    space = parse_space(SMALL_SPACE)
    options = _options(tmp_path, trials=3, verify=True, budget_restarts=40)
    with pytest.raises(Interrupted):  # 3 search restarts, then Ctrl-C in verification
        run_study(space, FakeEngine(TRUTH, interrupt_after=4), options)
    assert ledger_mod.load("e", options.storage).search_end().reason == TRIALS
    # The interrupted round's claim was given up, not left to its live process's heartbeat: the resume below, in
    # this same process, takes the round over at once (it waited out the grace period, two minutes, before).
    claims = optuna.load_study(study_name="e" + CLAIMS_SUFFIX, storage=options.storage)
    assert [t.state for t in claims.get_trials() if t.state == TrialState.RUNNING] == []
    assert any(t.state == TrialState.FAIL and t.user_attrs for t in claims.get_trials())
    err = io.StringIO()
    run_study(space, FakeEngine(TRUTH), options, [ProgressPrinter(err)])
    said = [x for x in err.getvalue().splitlines() if "going straight to verification" in x]
    assert said == ["The search was already over (trials reached: 3 of 3 trials done): going straight to "
                    "verification"], err.getvalue()


def test_a_fresh_study_prints_why_its_search_ended(tmp_path):
    err = io.StringIO()
    run_study(parse_space(SMALL_SPACE), FakeEngine(TRUTH), _options(tmp_path, trials=3, verify=True), [ProgressPrinter(err)])
    assert "Search over: trials reached: 3 of 3 trials done" in err.getvalue()
    assert "going straight to verification" not in err.getvalue()


def test_a_stored_end_reads_back_and_an_older_record_keeps_its_defaults():
    end = SearchEnd(BUDGET, 3, 10, 20, 15.5, None, 16.0, 4, 2.0, 2, 1.2)
    assert decode(SearchEnd, encode(end)) == end
    assert decode(SearchEnd, {"reason": TRIALS, "unknown_later_field": 1}).reason == TRIALS


def _interrupted_lines(report) -> list[str]:
    text = report.render().splitlines()
    start = next(i for i, x in enumerate(text) if x.startswith("Interrupted trials ("))
    return [x for x in text[start + 1:] if x.startswith("  ~ trial ")]


def test_an_interrupted_trial_says_whether_its_configuration_ran_again(tmp_path):
    # The H200 MoE study's report said "their configurations ran again" of a trial whose configuration never did:
    # its resume found the search over and went to verification. Each interrupted trial now says which.
    space = parse_space(SMALL_SPACE)
    with pytest.raises(Interrupted):  # the third restart is cut short, in the third search trial
        run_study(space, FakeEngine(TRUTH, interrupt_after=3), _options(tmp_path, trials=5))
    # Resumed with a trial count the finished trials reach already: the search is over, nothing runs again.
    ended = build_report(run_study(space, FakeEngine(TRUTH), _options(tmp_path, trials=2)))
    assert ended.search_end.reason == TRIALS
    [cut] = ended.interrupted
    [line] = _interrupted_lines(ended)
    assert line.startswith(f"  ~ trial {cut.trial} ")
    assert line.endswith("; queued again, not run: the search ended first")
    assert ended.trials.interrupted == 1 and "1 interrupted" in ended.render(), "the header counts the list"
    resumed = build_report(run_study(space, FakeEngine(TRUTH), _options(tmp_path, trials=5)))
    [line] = _interrupted_lines(resumed)
    again = [t.record.number for t in resumed.search_trials
             if t.record.number > cut.trial and t.record.config.label() == cut.label]
    assert again and line.endswith(f"; ran again as trial {again[0]}"), line
    assert "each says what became of its configuration" in resumed.render()
