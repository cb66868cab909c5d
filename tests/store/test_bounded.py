"""Issue 32, principle 6: stored records are bounded in size, the whole text kept in the log file beside the study.

An engine that fails with a runaway log (a warning loop, a traceback holding a megabyte of repr) or reports
start-up facts without end used to be stored whole, in every record that carried the restart: the Optuna store
(SQLite or PostgreSQL), claims, MLflow, the report's JSON.
"""

from __future__ import annotations

import json

import optuna

from autotune.records import decode, encode
from autotune.core.records import Resolved, RestartResult
from autotune.store.ledger import Ledger


def _huge_restart(log_path: str) -> RestartResult:
    resolved = Resolved(cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=tuple(range(1, 513)),
                        details={"notes_blob": "w" * 1_000_000, "nested": {str(i): list(range(1000)) for i in range(1000)},
                                 "deep": [[[[[[[["x" * 10_000]]]]]]]]},
                        notes=tuple("WARNING " + "v" * 5000 for _ in range(5000)))
    return RestartResult(status="failed", error="Traceback " + "e" * 1_000_000, log_path=log_path,
                         log_tail="".join(f"WARNING line {i}\n" for i in range(200_000)) + "RuntimeError: the end\n",
                         resolved=resolved)


def test_a_runaway_engine_record_is_stored_bounded_and_says_where_the_whole_log_is(tmp_path) -> None:
    log = str(tmp_path / "runs" / "trial-0" / "r0.log")
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/o.db", study_name="s", direction="maximize")
    ledger = Ledger(study, create=True)
    trial = study.ask()
    ledger.record_restarts(trial, [_huge_restart(log)])
    stored = json.dumps(study.trials[0].user_attrs)
    assert len(stored) < 100_000, f"the stored record is {len(stored)} characters"
    (back,) = ledger.restarts(study.trials[0])
    # The tail keeps the end of the log (why it stopped) and says where the whole is; the error keeps its start.
    assert back.log_tail.rstrip().endswith("RuntimeError: the end") and f"the whole log: {log}" in back.log_tail
    assert back.error.startswith("Traceback eee") and "characters cut" in back.error
    # What the audit compares is kept whole; texts and long lists are cut with a count.
    assert back.resolved.cudagraph_capture_sizes == tuple(range(1, 513))
    assert len(back.resolved.notes) < 20 and back.resolved.notes[-1].endswith("more notes cut")
    assert len(back.resolved.details["notes_blob"]) < 2_100
    # Cut once: a record read back and stored again is the same record.
    assert decode(RestartResult, json.loads(json.dumps(encode(back)))) == back


def test_a_normal_record_is_stored_unchanged() -> None:
    r = RestartResult(status="failed", error="CUDA out of memory", log_tail="a\nb\n", log_path="/x.log",
                      resolved=Resolved(cudagraph_mode="FULL", details={"model_runner": "v1", "graphs": {"a": 1}},
                                        notes=("one",)))
    assert decode(RestartResult, json.loads(json.dumps(encode(r)))) == r
    assert r.error == "CUDA out of memory" and r.log_tail == "a\nb\n" and r.resolved.notes == ("one",)
