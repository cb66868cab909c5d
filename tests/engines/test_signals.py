"""Engines never outlive autotune: SIGTERM and SIGHUP take Ctrl-C's path and are never lost, and a daemon that left
its group is caught."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import mlflow
import pytest
import yaml
from optuna.trial import TrialState

from autotune.store import ledger as ledger_mod
from autotune.engines.cmd import CmdEngine
from autotune.core.records import EngineConfig, Workload
from autotune.core.exit_status import ExitStatus
from tests.conftest import SMALL_SPACE, store

REPO = Path(__file__).resolve().parents[2]
RESULT = {"status": "ok", "passes_tok_s": [100.0], "resolved": {"cudagraph_mode": None}}


def _alive(pid: int) -> bool:
    """Running (a zombie is not: it holds nothing, and is gone once reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _zombie_children() -> list[int]:
    me, out = os.getpid(), []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == me:
            out.append(int(entry.name))
    return out


def _wait_for(path: Path, timeout_s: float, proc: subprocess.Popen | None = None) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_a_double_forked_setsid_daemon_does_not_outlive_the_restart(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    engine = _script(tmp_path, "daemonizing.py", f"""
        import json, os, sys, time
        sys.stdin.read()
        if os.fork() == 0:          # the classic daemon: fork, setsid (a new session and group), fork again
            os.setsid()
            if os.fork() == 0:
                open({str(pidfile)!r} + ".tmp", "w").write(f"{{os.getpid()}} {{os.getsid(0)}}")
                os.rename({str(pidfile)!r} + ".tmp", {str(pidfile)!r})
                time.sleep(600)
            os._exit(0)
        while not os.path.exists({str(pidfile)!r}):
            time.sleep(0.01)
        print(json.dumps({RESULT!r}))
    """)
    cmd = CmdEngine(cache_dir=str(tmp_path / "cache"), command=[sys.executable, str(engine)], kill_grace_s=1)
    daemon = None
    try:
        result = cmd.run_restart(EngineConfig(), Workload(), restart=0, seed=0)
        daemon, session = map(int, pidfile.read_text().split())
        assert result.ok, result.error
        assert not _alive(daemon), "the setsid daemon escaped the process-group kill"
        assert f"{daemon} (python" in Path(result.log_path).read_text()  # and the restart's log says so
        # Re-parented to us (the subreaper), the daemon and the fork that made it were reaped: no zombies kept.
        assert not Path(f"/proc/{daemon}").exists()
        assert not [pid for pid in _zombie_children() if os.getsid(pid) == session]
    finally:
        if daemon is not None and _alive(daemon):
            os.kill(daemon, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_during_a_cmd_restart_stops_the_engine_and_saves_the_study(
        tmp_path: Path, sig: signal.Signals) -> None:
    """SIGHUP (SIG07: a closed terminal or ssh session) takes exactly SIGTERM's path; the status is 128 + the
    signal's number, as a shell reports a process the signal ended (143, 129)."""
    pidfile = tmp_path / "engine.pid"
    engine = _script(tmp_path, "slow.py", f"""
        import os, sys, time
        sys.stdin.read()
        open({str(pidfile)!r} + ".tmp", "w").write(str(os.getpid()))
        os.rename({str(pidfile)!r} + ".tmp", {str(pidfile)!r})
        time.sleep(600)
    """)
    space = {**SMALL_SPACE, "engine": {"name": "cmd", "command": [sys.executable, str(engine)]}}
    space_path = tmp_path / "space.yaml"
    space_path.write_text(yaml.safe_dump(space))
    storage, tracking = f"sqlite:///{tmp_path}/optuna.db", store(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "tune", "--space", str(space_path), "--study", "term", "--storage", storage,
         "--workdir", str(tmp_path / "work"), "--trials", "2", "--no-verify", "--tracking-uri", tracking, "--quiet"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    engine_pid = None
    try:
        engine_pid = _wait_for(pidfile, 120, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        if engine_pid is not None and _alive(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)
            pytest.fail("the engine outlived autotune")
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {sig.name}" in err and "run the same command again to resume" in err
    # The interrupted trial is failed as interrupted and queued again: the resume semantics of Ctrl-C.
    ledger = ledger_mod.load("term", storage)
    trials = ledger.study.get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    (cut,) = [r for r in ledger.trial_records() if r.interrupted]
    assert cut.state == "FAIL" and cut.reason == f"interrupted by {sig.name}"
    queued = [t.system_attrs.get("fixed_params") for t in trials if t.state == TrialState.WAITING]  # enqueue_trial's
    assert next(t for t in trials if t.number == cut.number).params in queued
    # No MLflow run is left RUNNING.
    client = mlflow.MlflowClient(tracking)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs and all(r.info.status != "RUNNING" for r in runs), [(r.info.run_name, r.info.status) for r in runs]


# -- a signal is never swallowed (SIG05) -------------------------------------------------------------------


class _SlowFinalizer:
    """Sleeps in ``__del__``: a signal landing there has its handler run, and raise, inside a finalizer."""

    def __del__(self) -> None:
        time.sleep(0.5)


def _term_soon(delay_s: float = 0.1) -> None:
    import threading

    threading.Timer(delay_s, os.kill, (os.getpid(), signal.SIGTERM)).start()


def test_a_sigterm_swallowed_by_a_finalizer_still_interrupts_the_block(capfd: pytest.CaptureFixture[str]) -> None:
    from autotune.engines.process import SignalInterrupt, interrupt_on_sigterm

    started = time.monotonic()
    with pytest.raises(SignalInterrupt) as caught:
        with interrupt_on_sigterm():
            _term_soon()
            _SlowFinalizer()  # dropped at once: __del__ runs here and the signal lands in it
            for _ in range(100):  # the study goes on: the interruption must reach it, soon
                time.sleep(0.05)
    assert caught.value.signum == signal.SIGTERM
    assert time.monotonic() - started < 2.0
    assert "Exception ignored" not in capfd.readouterr().err


def test_a_sigterm_swallowed_as_the_block_ends_is_raised_on_the_way_out(capfd: pytest.CaptureFixture[str]) -> None:
    from autotune.engines.process import SignalInterrupt, interrupt_on_sigterm

    with pytest.raises(SignalInterrupt) as caught:
        with interrupt_on_sigterm():
            _term_soon()
            _SlowFinalizer()  # the last thing the block does (the final report's garbage, MLflow's finalizers)
    assert caught.value.signum == signal.SIGTERM
    assert "Exception ignored" not in capfd.readouterr().err


#: Runs ``autotune tune`` with one function made slow *inside a garbage-collection finalizer* on one call, after
#: writing a marker (the stack, for a failure's message): the moment SIG05's SIGTERM was lost. ``report`` is the final
#: report's printing (after the study and its MLflow runs ended), ``mlflow`` is MLflow's logging of a trial (the
#: third batch logged).
_DRIVER = """
import gc, os, sys, time, traceback
where, marker = sys.argv[1], sys.argv[2]
if where == "report":
    import autotune.cli.worker as owner
    name, skip = "_print_report", 0
else:
    from mlflow.tracking import MlflowClient as owner
    name, skip = "log_batch", 2
original = getattr(owner, name)
calls = []

class Slow:
    def __del__(self):
        time.sleep(1.5)

def slow(*args, **kwargs):
    calls.append(1)
    if len(calls) == skip + 1:
        cycle = Slow()
        cycle.me = cycle
        del cycle
        open(marker, "w").write("".join(traceback.format_stack(limit=12)))
        gc.collect()
    return original(*args, **kwargs)

setattr(owner, name, slow)
from autotune.cli._main import raw_main
sys.exit(int(raw_main(sys.argv[3:])))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
@pytest.mark.parametrize("where, sig, delay_s", [("report", signal.SIGTERM, 0.2), ("mlflow", signal.SIGTERM, 0.7),
                                                 ("report", signal.SIGHUP, 0.9), ("mlflow", signal.SIGHUP, 0.1)])
def test_a_signal_during_the_final_report_or_mlflow_logging_is_never_lost(
        tmp_path: Path, where: str, sig: signal.Signals, delay_s: float) -> None:
    marker = tmp_path / "marker"
    storage, tracking = f"sqlite:///{tmp_path}/optuna.db", store(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, where, str(marker), "tune", "--space", str(REPO / "search_spaces/gb10.yaml"),
         "--engine", "sim", "--trials", "2", "--no-verify", "--quiet", "--study", "sig", "--storage", storage,
         "--workdir", str(tmp_path / "work"), "--tracking-uri", tracking],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), proc.communicate(timeout=60)[1]
        time.sleep(delay_s)  # inside the finalizer's 1.5 s
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    where_text = marker.read_text()
    assert proc.returncode == 128 + sig, err + where_text
    # The last word is autotune's, not an uncaught traceback. (An interruption inside MLflow's SQL session makes
    # MLflow's own logger print the traceback it caught; autotune carries on from it.)
    assert f"autotune: interrupted by {sig.name}" in err.strip().splitlines()[-1], err
    assert "Exception ignored" not in err, err
    ledger = ledger_mod.load("sig", storage)
    assert not [t for t in ledger.study.get_trials() if t.state == TrialState.RUNNING]
    client = mlflow.MlflowClient(tracking)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    if where == "report":  # the study and its runs had ended before the signal
        assert all(r.info.status != "RUNNING" for r in runs), ([(r.info.run_name, r.info.status) for r in runs], err)
    elif any(r.info.status == "RUNNING" for r in runs):  # a run MLflow could not close: the resume closes it
        resume = subprocess.run(proc.args[:1] + ["-m", "autotune", *proc.args[5:]], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        assert resume.returncode == 0, resume.stderr
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        assert all(r.info.status != "RUNNING" for r in runs), [(r.info.run_name, r.info.status) for r in runs]


def test_a_termination_signal_waits_for_the_storage_connection_and_then_interrupts(tmp_path: Path) -> None:
    """SIGTERM arriving while the main thread holds a storage connection (mid-transaction) is delivered just after
    the connection goes back: the transaction completes, the interruption still comes, and the interruption's own
    write to the same SQLite file does not find the database locked."""
    import optuna
    import sqlalchemy

    from autotune.engines.process import SignalInterrupt, interrupt_on_sigterm
    from autotune.store.ledger import make_storage

    storage = make_storage(f"sqlite:///{tmp_path}/optuna.db", heartbeat_s=5)
    study = optuna.create_study(study_name="s", storage=storage)
    study.enqueue_trial({"x": 1})
    sent: list[float] = []

    def signal_mid_transaction(*_: object) -> None:
        if not sent:
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    sqlalchemy.event.listen(storage.engine, "checkout", signal_mid_transaction)
    finished = interrupted = None
    with pytest.raises(SignalInterrupt):
        with interrupt_on_sigterm():
            trials = study.get_trials()  # the signal arrives inside this read's connection
            finished = time.monotonic()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
            interrupted = "never"
    assert sent and finished is not None and interrupted is None and len(trials) == 1
    sqlalchemy.event.remove(storage.engine, "checkout", signal_mid_transaction)
    # The interruption's bookkeeping: a write to the same file, at once, is not "database is locked".
    study.tell(study.ask(), 1.0)
    assert len(study.get_trials()) == 1


def test_a_signal_held_for_a_connection_never_given_back_is_still_delivered(monkeypatch) -> None:
    from autotune.engines import _signals as process  # the signal machinery's module (issue 32 moved it)

    monkeypatch.setattr(process, "_HOLD_MAX_S", 0.3)
    with pytest.raises(process.SignalInterrupt):
        with process.interrupt_on_sigterm():
            process.hold_interruptions()  # and never released: a pool that did not report the checkin
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                process._deferral.depth = 0
