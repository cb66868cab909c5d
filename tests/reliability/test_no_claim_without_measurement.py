"""Claims without measurements: a study that measured nothing (or no baseline) says so and exits non-zero."""

from __future__ import annotations

import io
import json
from pathlib import Path

from autotune.records import decode, encode
from autotune.cli._main import raw_main
from autotune.study._restart import ALWAYS_COLD
from autotune.decisions.racing import RacingPolicy
from autotune.core.records import Resolved, RestartResult
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.core.exit_status import ExitStatus
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE, FakeEngine


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="c", storage=f"sqlite:///{tmp_path}/o.db", workdir=str(tmp_path / "w"), trials=5,
                policy=RacingPolicy(min_restarts=2, racing=False), top_k=2, verify_restarts=2)
    base.update(kw)
    return StudyOptions(**base)


def test_a_missing_engine_command_exits_non_zero_and_export_refuses(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path}/o.db"
    argv = ["tune", "--space", "search_spaces/gb10.yaml", "--engine", "cmd", "--engine-opt",
            "command=nonexistent-engine", "--trials", "3", "--storage", storage, "--workdir", str(tmp_path / "w"),
            "--study", "missing", "--no-mlflow", "--quiet", "--json", str(tmp_path / "r.json")]
    out = io.StringIO()
    status = raw_main(argv, out=out)
    err = capsys.readouterr().err
    assert status == ExitStatus.NO_RESULT
    assert "has no result" in err and "nonexistent-engine" in err
    assert "WINNER" not in out.getvalue() and "keep the engine defaults" not in out.getvalue()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["no_result"] and "nonexistent-engine" in report["no_result"]
    status = raw_main(["export", "--storage", storage, "--study", "missing"], out=(buf := io.StringIO()))
    assert status == ExitStatus.NO_RESULT and buf.getvalue() == ""
    assert "no measured winner" in capsys.readouterr().err


def test_a_failed_baseline_claims_no_speedup(tmp_path):
    space = parse_space(SMALL_SPACE)
    baseline_key = space.baseline().key()
    engine = FakeEngine(lambda c: 100.0 + 50 * c.num_speculative_tokens, fail=lambda c: c.key() == baseline_key)
    report = build_report(run_study(space, engine, _options(tmp_path)))
    assert report.no_result and "baseline" in report.no_result
    text = render_report(report)
    assert "nanx" not in text and "Verdict: NONE" in text and "RuntimeError" in text
    # The search stopped at the failed baseline: nothing after it could be claimed, so nothing after it ran.
    assert report.trials.complete + report.trials.screened + report.trials.pruned == 0 and report.trials.fail == 1
    assert "Search ended: the baseline failed: engine defaults failed" in text
    assert engine.calls and all(key == baseline_key for key, _ in engine.calls)


def test_no_verify_with_every_trial_failed_is_no_result(tmp_path):
    engine = FakeEngine(lambda c: 100.0, fail=lambda c: True)
    report = build_report(run_study(parse_space(SMALL_SPACE), engine, _options(tmp_path, verify=False)))
    assert report.no_result.startswith("no search trial was measured: restart 0 failed")


def test_a_measured_study_has_a_result(tmp_path):
    engine = FakeEngine(lambda c: 100.0 + 50 * c.num_speculative_tokens)
    report = build_report(run_study(parse_space(SMALL_SPACE), engine, _options(tmp_path)))
    assert report.no_result is None and report.verdict == "faster"


class AlwaysCold(FakeEngine):
    """An engine whose cold flag never clears (e.g. a compile cache that is not kept between restarts)."""

    def run_restart(self, config, workload, *, restart, seed):
        result = super().run_restart(config, workload, restart=restart, seed=seed)
        return decode(RestartResult, {**encode(result), "cold": True})


def test_an_engine_that_always_reports_cold_fails_with_the_reason(tmp_path):
    report = build_report(run_study(parse_space(SMALL_SPACE), AlwaysCold(lambda c: 100.0), _options(tmp_path)))
    assert report.failures and all(ALWAYS_COLD in f.reason for f in report.failures)
    assert report.no_result is not None and "cold" in report.no_result
    assert "cold flag never clears" in render_report(report)


def test_report_json_holds_search_trials_resolved_plans_and_every_restart(tmp_path):
    def resolve(config):
        return Resolved(cudagraph_mode=config.cudagraph_mode or "FULL_AND_PIECEWISE",
                        cudagraph_capture_sizes=config.capture_sizes or (1, 2, 4))

    options = _options(tmp_path, trials=8)
    ledger = run_study(parse_space(SMALL_SPACE), FakeEngine(lambda c: 100.0, resolve=resolve), options)
    report = json.loads(json.dumps(build_report(ledger).to_json(), default=str))
    trials = report["search_trials"]
    assert [t["trial"] for t in trials] == sorted(t.number for t in ledger.study.trials
                                                  if ledger.has_config(t))
    ran = [t for t in trials if t["duplicate_of"] is None]
    assert all(t["resolved"]["cudagraph_mode"] for t in ran)
    stored = sum(len(r.restarts) for r in ledger.trial_records())
    in_report = sum(len(t["restarts"]) for t in trials)
    verify = sum(len(e["restarts"]) for e in report["verification"]["entries"])
    assert in_report == stored and in_report + verify == report["budget"]["restarts_used"]
    assert all("value" in r and "counted" in r for t in trials for r in t["restarts"])


def test_duplicates_are_shown_in_the_text_report(tmp_path):
    tiny = {**SMALL_SPACE, "search": {"cudagraph_mode": ["NONE"], "num_speculative_tokens": {"low": 0, "high": 0}}}
    ledger = run_study(parse_space(tiny), FakeEngine(lambda c: 100.0), _options(tmp_path, trials=4, verify=False))
    report = build_report(ledger)
    assert report.trials.duplicates > 0
    text = render_report(report)
    assert f"Repeated suggestions ({report.trials.duplicates}" in text and "same configuration as trial" in text
