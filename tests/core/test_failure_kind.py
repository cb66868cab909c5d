"""A failed restart's kind: set by the engine that knew it, stored with the restart, and read the same way from
restarts stored by older autotune (which have only the error line)."""

from __future__ import annotations

from autotune.records import decode, encode
from autotune.core.failure import FailureKind, kind_of
from autotune.core.records import RestartResult, RestartStatus
from autotune.core.transient import is_transient, standing


def test_an_old_stored_restart_is_read_by_its_error_line():
    # As autotune before the kind stored them: no failure_kind key.
    guard = decode(RestartResult, {"status": "failed", "error": "memory guard: MemAvailable fell below the floor"})
    lost = decode(RestartResult, {"status": "failed", "error": "restart lost: the forkserver host died"})
    timeout = decode(RestartResult, {"status": "timeout", "error": "engine start-up exceeded 900 s"})
    broken = decode(RestartResult, {"status": "failed", "error": "CUDA out of memory"})
    assert [kind_of(r) for r in (guard, lost, timeout, broken)] == [
        FailureKind.GUARD, FailureKind.LOST, FailureKind.TIMEOUT, FailureKind.ENGINE]
    assert [is_transient(r) for r in (guard, lost, timeout, broken)] == [True, True, False, False]


def test_the_kind_an_engine_sets_is_stored_and_read_back_whatever_the_error_says():
    result = RestartResult.failure(RestartStatus.FAILED, "host memory ran out", failure_kind=FailureKind.GUARD)
    stored = encode(result)
    assert stored["failure_kind"] == "guard"
    back = decode(RestartResult, stored)
    assert back.failure_kind is FailureKind.GUARD and kind_of(back) is FailureKind.GUARD and is_transient(back)


def test_an_ok_restart_has_no_kind_and_stores_no_kind_key():
    ok = RestartResult(status=RestartStatus.OK, passes_tok_s=(100.0,))
    assert kind_of(ok) is None and not is_transient(ok)
    assert "failure_kind" not in encode(ok)


def test_a_kind_from_a_newer_autotune_falls_back_to_the_error_line():
    stored = {"status": "failed", "error": "memory guard: ...", "failure_kind": "cosmic-ray"}
    assert kind_of(decode(RestartResult, stored)) is FailureKind.GUARD


def test_a_transient_failure_run_again_leaves_the_summary():
    lost = RestartResult.failure(RestartStatus.FAILED, "the host went away", failure_kind=FailureKind.LOST)
    rerun = RestartResult(status=RestartStatus.OK, passes_tok_s=(100.0,))
    assert standing([lost, rerun]) == [rerun]
