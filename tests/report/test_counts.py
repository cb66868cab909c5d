"""Every count in the report's header is the length of the list below it (issue 21, item 4).

The H200 report said "2 failed" while its list showed one: the header counted every Optuna FAIL (a trial given
back before it started, an interrupted one queued again) and the list only the failures with a reason. These
tests build a study with each kind of trial through the ledger and check the header, the text lists and
``--json`` against each other.
"""

from __future__ import annotations

import re
import subprocess
import sys

import optuna
from optuna.trial import TrialState

from autotune.config.space import parse_space
from autotune.core.records import RestartResult, RestartStatus
from autotune.report._build import build_report
from autotune.store._owners import owner_id
from autotune.store.ledger import create_or_load
from tests.conftest import SMALL_SPACE


def _dead_owner() -> dict:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return {**owner_id(), "pid": proc.pid}


def _study(tmp_path):
    ledger, _ = create_or_load("counts", f"sqlite:///{tmp_path}/c.db", sampler=optuna.samplers.RandomSampler(0),
                               pruner=optuna.pruners.NopPruner(), heartbeat_s=60)
    space = parse_space(SMALL_SPACE)
    configs = [space.config_from_params(p) for p in space.all_params()]
    study = ledger.study
    ok = RestartResult(RestartStatus.OK, restart=0, seed=1, passes_tok_s=(100.0, 101.0))

    def trial(i: int, state: TrialState | None, **how):
        t = study.ask()
        if how.get("infeasible"):
            ledger.record_infeasible(t, "not in the space")
            study.tell(t, state=TrialState.PRUNED)
            return t
        if not how.get("no_config"):
            ledger.record_config(t, configs[i])
            ledger.record_restarts(t, [ok])
        if "failure" in how:
            ledger.record_failure(t, how["failure"])
        if "pruned" in how:
            ledger.record_pruned(t, how["pruned"])
        if "interrupted" in how:
            ledger.record_interrupted(t, how["interrupted"])
        if "duplicate" in how:
            ledger.record_duplicate(t, how["duplicate"])
        if state == TrialState.COMPLETE:
            study.tell(t, 100.0 + i)
        elif state is not None:
            study.tell(t, state=state)
        return t

    first = trial(0, TrialState.COMPLETE)
    trial(1, TrialState.COMPLETE, pruned="screened on its cold start")
    trial(2, TrialState.PRUNED, pruned="raced out: slower than the incumbent")
    trial(3, TrialState.FAIL, failure="restart 0 failed: CUDA out of memory")
    trial(4, TrialState.FAIL)  # a FAIL with no reason recorded still counts, and is listed, as a failure
    trial(5, TrialState.FAIL, interrupted="interrupted by user (Ctrl-C)")
    trial(6, TrialState.FAIL, no_config=True, interrupted="not started: the engine-start budget is spent")
    trial(0, TrialState.COMPLETE, duplicate=study.trials[first.number])
    trial(0, None, infeasible=True)
    # A worker that died mid-trial: failed as stale and queued again by Optuna's retry callback, then finished.
    stale = trial(7, None)
    ledger.record_owner(stale, _dead_owner())
    assert ledger.fail_stale() == 1
    retry = study.ask()
    study.tell(retry, 107.0)
    return ledger


def _header(text: str) -> dict[str, int]:
    line = next(x for x in text.splitlines() if x.startswith("Trials:"))
    return {what: int(n) for n, what in re.findall(r"(\d+) (complete|raced out|failed|interrupted)", line)}


def _listed(text: str, title: str) -> int:
    """The number in a list's title, checked against the lines under it."""
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith(title))
    n = int(re.match(rf"{re.escape(title)} \((\d+)", lines[at]).group(1))
    items = [x for x in lines[at + 1:at + 1 + n] if x.startswith("  ")]
    assert len(items) == n, lines[at:at + n + 1]
    return n


def test_header_counts_match_the_lists_with_failures_retries_interruptions_and_pruned_trials(tmp_path):
    report = build_report(_study(tmp_path))
    text, data = report.render(), report.to_json()
    header = _header(text)
    rows = data["search_trials"]
    # The header and the text lists.
    assert header["failed"] == _listed(text, "Failed trials") == len(report.failures) == 2
    assert header["interrupted"] == _listed(text, "Interrupted trials") == len(report.interrupted) == 2
    assert _listed(text, "Repeated suggestions") == report.trials.duplicates == 1
    # --json: each count is the length of its list, and of the search trials in that state.
    assert data["trials"]["fail"] == len(data["failures"]) and data["trials"]["interrupted"] == len(data["interrupted"])
    measured = [r for r in rows if r["duplicate_of"] is None and not r["interrupted"]]
    assert header["complete"] + data["trials"]["screened"] == sum(r["state"] == "COMPLETE" for r in measured) == 3
    assert header["raced out"] == sum(r["state"] == "PRUNED" for r in measured) == 1
    assert header["failed"] == sum(r["state"] == "FAIL" for r in measured)
    assert header["interrupted"] == sum(r["interrupted"] for r in rows)
    # What is in neither list is said apart: the trial given back before it started, the infeasible suggestion.
    assert data["trials"]["not_started"] == 1 and data["trials"]["infeasible"] == 1
    reasons = {f.trial: f.reason for f in report.interrupted}
    assert any("no heartbeat" in r for r in reasons.values())
    # A Ctrl-C'd trial says what became of its configuration (here it was never queued again: not run again).
    assert any(r.startswith("interrupted by user (Ctrl-C); ") for r in reasons.values())
    assert any("no reason recorded" in f.reason for f in report.failures)


def test_a_study_without_failures_shows_no_failure_list(tmp_path):
    ledger, _ = create_or_load("clean", f"sqlite:///{tmp_path}/c.db", sampler=optuna.samplers.RandomSampler(0),
                               pruner=optuna.pruners.NopPruner(), heartbeat_s=60)
    space = parse_space(SMALL_SPACE)
    t = ledger.study.ask()
    ledger.record_config(t, space.baseline())
    ledger.study.tell(t, 100.0)
    text = build_report(ledger).render()
    assert _header(text) == {"complete": 1, "raced out": 0, "failed": 0}
    assert "Failed trials" not in text and "Interrupted trials" not in text
