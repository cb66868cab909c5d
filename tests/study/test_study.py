"""The study end to end on a table-driven engine: baselines, failures, warnings, verification, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.store import ledger as ledger_mod
from autotune.decisions.racing import RacingPolicy
from autotune.core.records import Resolved
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.study import Interrupted, StudyOptions, run_study
from tests import slow_study
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

TRUTH = {("FULL_AND_PIECEWISE", 2): 300.0, ("FULL_AND_PIECEWISE", 1): 250.0, ("PIECEWISE", 2): 220.0,
         ("NONE", 0): 40.0, ("default", 0): 200.0}


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="t", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                trials=12, policy=RacingPolicy(min_restarts=3, racing=False), top_k=3, verify_restarts=3, seed=1)
    base.update(kw)
    return StudyOptions(**base)


def test_baselines_run_first_and_verification_finds_the_true_best(tmp_path):
    space = parse_space(SMALL_SPACE)
    study = run_study(space, FakeEngine(by_params(TRUTH)), _options(tmp_path, trials=20))
    first, second = sorted(study.study.trials, key=lambda t: t.number)[:2]
    assert first.params["num_speculative_tokens"] == 0 and first.params["cudagraph_mode"] == "default"
    assert second.params["draft"] == "ngram" and second.params["cudagraph_mode"] == "default"
    report = build_report(study)
    assert report.winner.config.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert report.winner.config.num_speculative_tokens == 2
    assert report.baseline.config.compilation_config == {}
    assert report.verdict == "faster" and report.winner.speedup.ci_low > 1.2
    # Three common rounds; the truth ignores capture sizes, so a tie with the same mode and K at other sizes may
    # take the extra rounds up to the cap of 5.
    assert 3 <= report.winner.n <= 5
    text = render_report(report)
    assert "WINNER" in text and "Verdict: FASTER" in text
    # The verdict line states the multiplicity its level is corrected for: the challengers that went on after the
    # first round (a dropped runner-up is not compared).
    challengers = sum(1 for e in report.verification.entries if not e.is_baseline and not e.dropped)
    assert challengers >= 2 and f"CI, Bonferroni over {challengers} challengers, paired over " in text


def test_verification_overrules_a_lucky_search_best(tmp_path):
    space = parse_space(SMALL_SPACE)

    def lucky(cfg):  # a mediocre config that ran 60% fast in every search restart, never again
        return cfg.params.get("cudagraph_mode") == "PIECEWISE" and cfg.params.get("num_speculative_tokens") == 2

    engine = FakeEngine(by_params(TRUTH), lucky=lucky, lucky_factor=1.6)
    opts = _options(tmp_path, trials=30, top_k=3)
    optuna.create_study(study_name="t", storage=opts.storage).enqueue_trial(
        {"cudagraph_mode": "PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 2, "draft": "ngram"})
    study = run_study(space, engine, opts)
    report = build_report(study)
    search_best = max((t for t in study.study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert search_best.params["cudagraph_mode"] == "PIECEWISE"  # the search was fooled ...
    assert report.winner.config.cudagraph_mode == "FULL_AND_PIECEWISE"  # ... verification was not
    lucky_entry = next(e for e in report.verification.entries if e.trial_number == search_best.number)
    assert lucky_entry.mean < report.winner.mean


def test_a_failing_config_fails_its_trial_and_the_study_goes_on(tmp_path):
    space = parse_space(SMALL_SPACE)
    engine = FakeEngine(by_params(TRUTH), fail=lambda c: c.params.get("cudagraph_mode") == "PIECEWISE")
    study = run_study(space, engine, _options(tmp_path, trials=15))
    failed = [r for r in study.trial_records() if r.state == "FAIL"]
    assert failed and all("engine rejected the configuration" in r.reason for r in failed)
    # no restarts wasted after a failure, and none at all on a repeat of a failed configuration
    assert all(len(r.restarts) == (0 if r.duplicate_of is not None else 1) for r in failed)
    report = build_report(study)
    assert report.winner is not None and report.failures
    assert "engine rejected" in render_report(report)


def test_silent_changes_are_flagged_on_trial_and_report(tmp_path):
    space = parse_space(SMALL_SPACE)

    def resolve(cfg):  # the engine runs FULL_AND_PIECEWISE as PIECEWISE and rounds sizes when speculating
        mode = cfg.cudagraph_mode
        sizes = cfg.capture_sizes
        if mode == "FULL_AND_PIECEWISE" and cfg.num_speculative_tokens:
            mode = "PIECEWISE"
        if sizes and cfg.num_speculative_tokens:
            step = 1 + cfg.num_speculative_tokens
            sizes = tuple(sorted({max(step, s - s % step) for s in sizes}))
        return Resolved(cudagraph_mode=mode, cudagraph_capture_sizes=sizes)

    study = run_study(space, FakeEngine(by_params(TRUTH), resolve=resolve), _options(tmp_path, trials=15))
    flagged = [r for r in study.trial_records() if r.summary is not None and r.summary.resolved_differs]
    assert flagged
    assert any("cudagraph_mode: configured FULL_AND_PIECEWISE -> resolved PIECEWISE" in d
               for r in flagged for d in r.summary.differences)
    text = render_report(build_report(study))
    assert "WARNING: the engine silently changed the configuration" in text
    assert "configured FULL_AND_PIECEWISE -> resolved PIECEWISE" in text


def test_ctrl_c_keeps_finished_trials_and_resume_retries_the_interrupted_one(tmp_path):
    space = parse_space(SMALL_SPACE)
    opts = _options(tmp_path, trials=6)
    with pytest.raises(Interrupted, match="run the same command again to resume"):
        run_study(space, FakeEngine(by_params(TRUTH), interrupt_after=7), opts)
    ledger = ledger_mod.load("t", opts.storage)
    before = {r.number: r.value for r in ledger.trial_records() if r.state == "COMPLETE"}
    interrupted = [r for r in ledger.trial_records() if r.interrupted]
    assert len(before) == 2 and len(interrupted) == 1
    assert interrupted[0].reason == "interrupted by user (Ctrl-C)"
    run_study(space, FakeEngine(by_params(TRUTH)), opts)
    ledger = ledger_mod.load("t", opts.storage)
    after = {r.number: r.value for r in ledger.trial_records() if r.state == "COMPLETE"}
    assert all(after[n] == v for n, v in before.items())  # nothing lost, nothing re-measured
    retried = [r for r in ledger.trial_records() if r.config == interrupted[0].config and r.state == "COMPLETE"]
    assert retried, "the interrupted trial's parameters run again on resume"
    assert ledger.verification() is not None


def _restarts_recorded(db: Path) -> int:
    """Restarts the child has stored so far, read with plain SQLite: cheap enough to poll, and it never races the
    child's creation of Optuna's schema."""
    import sqlite3

    from autotune.store.ledger import _RESTARTS_KEY

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as con:
            rows = con.execute("select value_json from trial_user_attributes where key=?", (_RESTARTS_KEY,)).fetchall()
    except sqlite3.OperationalError:
        return 0
    return sum(row[0].count('"status"') for row in rows)


def test_resume_after_kill_9_loses_no_finished_trial(tmp_path):
    db = tmp_path / "optuna.db"
    storage = f"sqlite:///{db}"
    workdir = str(tmp_path / "work")
    proc = subprocess.Popen([sys.executable, "-m", "tests.slow_study", storage, workdir, "0.15"],
                            cwd=Path(__file__).resolve().parents[2], start_new_session=True)
    deadline = time.monotonic() + 60
    while _restarts_recorded(db) < 8 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    study = optuna.load_study(study_name="resume", storage=storage)
    complete_before = {t.number: t.value for t in study.trials if t.state == TrialState.COMPLETE}
    running = [t for t in study.trials if t.state == TrialState.RUNNING]
    assert len(complete_before) >= 2 and len(running) == 1

    space = parse_space(SMALL_SPACE)
    run_study(space, FakeEngine(by_params(slow_study.TRUTH)), slow_study.options(storage, workdir))
    ledger = ledger_mod.load("resume", storage)
    study = ledger.study
    by_number = {t.number: t for t in study.trials}
    assert all(by_number[n].value == v for n, v in complete_before.items())
    stale = by_number[running[0].number]
    assert stale.state == TrialState.FAIL and ledger.interrupted(stale)
    assert any(t.params == running[0].params and t.state == TrialState.COMPLETE for t in study.trials)
    finished = [t for t in study.trials if t.state != TrialState.RUNNING and not ledger.interrupted(t)]
    assert len(finished) >= 6 and ledger.verification() is not None


def test_fresh_study_starts_with_cold_caches(tmp_path):
    from autotune.engines.sim import SimEngine

    space = parse_space({**SMALL_SPACE, "name": "fresh"})
    opts = _options(tmp_path, trials=3, verify=False, fresh=True)

    def colds():
        ledger = run_study(space, SimEngine(profile="h200"), opts)
        return sum(r.cold for t in ledger.trial_records() for r in t.restarts)

    first = colds()
    assert first >= 2 and colds() == first  # a second --fresh run pays the same cold starts again


def test_under_an_slo_the_fastest_configuration_that_misses_it_cannot_win(tmp_path):
    # FULL_AND_PIECEWISE K=2 is the fastest (300 tok/s) but its p99 TPOT is 80 ms; K=1 (250 tok/s) meets 50 ms.
    space = parse_space({**SMALL_SPACE, "slo": {"tpot_p99_ms": 50}})
    tpot = {("FULL_AND_PIECEWISE", 2): 80.0}

    def latency(cfg):
        key = (cfg.params.get("cudagraph_mode", "default"), int(cfg.params.get("num_speculative_tokens", 0)))
        return {"tpot_p99_ms": tpot.get(key, 20.0), "ttft_p99_ms": 100.0}

    engine = FakeEngine(by_params(TRUTH), latency=latency)
    opts = _options(tmp_path, trials=20)
    optuna.create_study(study_name="t", storage=opts.storage).enqueue_trial(
        {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 2,
         "draft": "ngram"})
    study = run_study(space, engine, opts)
    fastest = [t for t in study.study.trials if t.params.get("cudagraph_mode") == "FULL_AND_PIECEWISE"
               and t.params.get("num_speculative_tokens") == 2 and t.state == TrialState.COMPLETE]
    assert fastest and all(t.constraints["tpot_p99_ms"] > 0 for t in fastest), "Optuna records it infeasible"
    feasible = [t for t in study.study.trials if t.state == TrialState.COMPLETE and t not in fastest]
    assert feasible and all(t.constraints["tpot_p99_ms"] <= 0 for t in feasible)
    report = build_report(study)
    winner = report.winner.config
    assert (winner.cudagraph_mode, winner.num_speculative_tokens) == ("FULL_AND_PIECEWISE", 1)
    assert report.winner.meets_slo and report.winner.latency["tpot_p99_ms"].mean < 50
    # Configurations that met the limit outrank it for verification, so it is not even verified.
    assert all(e.trial_number not in {t.number for t in fastest} for e in report.verification.entries)
    assert report.slo_outcome.baseline_meets and report.winner.speedup.speedup > 1.1
    text = render_report(report)
    assert "subject to tpot_p99_ms <= 50" in text and "measured trials missed a limit (tpot_p99_ms)" in text
    assert "winner and baseline both meet the limits" in text
    assert report.to_json()["winner"]["latency"]["tpot_p99_ms"]["mean"] < 50


def test_when_nothing_meets_the_slo_the_report_says_so(tmp_path):
    space = parse_space({**SMALL_SPACE, "slo": {"ttft_p99_ms": 10}})
    engine = FakeEngine(by_params(TRUTH), latency=lambda cfg: {"ttft_p99_ms": 100.0})
    report = build_report(run_study(space, engine, _options(tmp_path, trials=6, top_k=2)))
    assert report.winner_is_baseline and not report.slo_outcome.any_met
    assert {label for label, _, _ in report.slo_outcome.missed} == {e.label for e in report.verification.entries}
    text = render_report(report)
    assert "no verified configuration met the limits" in text and "MISSES ttft_p99_ms" in text
    assert "Verdict: no configuration met the latency limits" in text


def test_a_repeated_suggestion_starts_nothing_counts_no_trial_and_the_next_trial_explores(tmp_path):
    """TPE repeats itself once one region dominates its model; a repeat is answered from the record, and the trial
    after it is an unmeasured configuration, so ``trials`` measured configurations are what the study measures."""
    space = parse_space(SMALL_SPACE)
    n_configs = len({space.config_from_params(p).key() for p in space.all_params()})
    trials = n_configs - 1
    study = run_study(space, FakeEngine(by_params(TRUTH)), _options(tmp_path, trials=trials, verify=False))
    records = study.trial_records()
    repeats = [r for r in records if r.duplicate_of is not None]
    measured = [r for r in records if r.duplicate_of is None and r.state != "PRUNED"]
    assert repeats, "no repeated suggestion: the space is too large for this test"
    assert all(not r.restarts for r in repeats)  # a repeat starts no engine
    # Every repeat is followed by a trial of a configuration nobody had measured.
    keys = [r.config.key() for r in sorted(records, key=lambda r: r.number)]
    for r in repeats:
        assert r.number + 1 < len(keys) and keys[r.number + 1] not in keys[: r.number + 1]
    # Repeats do not count towards --trials: the study measured `trials` distinct configurations.
    assert len({r.config.key() for r in measured}) == len(measured) == trials
