"""Engines a killed autotune left running: the next autotune stops them (SIGKILL cannot be handled)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from autotune.engines.process import TAG_ENV, orphaned_engine_processes, scope_of, set_scope, stop_orphans

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _engine(owner: int, scope: str) -> subprocess.Popen[bytes]:
    """A process tagged as an engine that autotune ``owner`` started for the workdir of ``scope``."""
    env = {**os.environ, TAG_ENV: f"{owner}-{scope}-0123456789abcdef"}
    return subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def test_an_engine_whose_autotune_was_killed_is_stopped_and_reported(caplog, tmp_path):
    # Only an autotune of the same workdir stops it: no other test's study (each has its own workdir) can.
    scope = set_scope(tmp_path)
    for _ in range(5):
        orphan = _engine(_dead_pid(), scope)
        try:
            time.sleep(0.2)  # let it exec, so /proc shows its environment
            found = orphaned_engine_processes()
            if not _alive(orphan):
                continue
            assert orphan.pid in found
            caplog.clear()
            with caplog.at_level("WARNING"):
                stopped = stop_orphans()
            if orphan.pid not in [s.pid for s in stopped] and not _alive(orphan):
                continue
            assert orphan.pid in [s.pid for s in stopped]
            orphan.wait(timeout=10)
            assert "left running by an autotune that was killed" in caplog.text
            return
        finally:
            if _alive(orphan):
                orphan.kill()
                orphan.wait()
    pytest.fail("every orphan was stopped by another process before this test could stop it")


def test_an_engine_whose_autotune_still_runs_is_left_alone(tmp_path):
    owner = subprocess.Popen(["sleep", "600"])
    time.sleep(0.1)
    engine = _engine(owner.pid, set_scope(tmp_path))  # started after its owner, as an engine is
    try:
        time.sleep(0.2)
        assert engine.pid not in orphaned_engine_processes()
        stop_orphans()
        assert _alive(engine)
    finally:
        for proc in (engine, owner):
            proc.kill()
            proc.wait()


def test_an_orphan_of_another_workdir_is_left_alone_and_reported(caplog, tmp_path):
    """A killed autotune's engine started for another workdir is another run's (another test's, another session's):
    this one did not start it and leaves it running, and says so (it may hold the GPU)."""
    set_scope(tmp_path / "mine")
    orphan = _engine(_dead_pid(), scope_of(tmp_path / "theirs"))
    try:
        time.sleep(0.2)
        assert orphan.pid in orphaned_engine_processes()  # an orphan on the machine ...
        assert orphan.pid not in orphaned_engine_processes(scope_of(tmp_path / "mine"))  # ... but not this workdir's
        with caplog.at_level("WARNING"):
            stopped = stop_orphans()
        assert orphan.pid not in [s.pid for s in stopped]
        time.sleep(0.2)
        assert _alive(orphan)
        assert "another workdir, left alone" in caplog.text and str(orphan.pid) in caplog.text
    finally:
        orphan.kill()
        orphan.wait()


def test_a_study_tags_its_engines_with_its_workdir(tmp_path):
    from autotune.engines.process import new_tag

    token = set_scope(tmp_path)
    assert token == scope_of(tmp_path / "." ) and new_tag().split("-")[1] == token
    assert str(tmp_path) not in new_tag()  # a tag names the workdir by a hash, never by its path


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_an_interruption_while_an_engine_starts_does_not_leak_it(monkeypatch, signame):
    """The signal lands while the child is forked: Python runs the handler as the fork returns, before ``Popen``
    has recorded the child's pid (the window that once left a cmd engine running after ``autotune`` exited)."""
    from autotune.engines import process as _process

    sig = getattr(signal, signame)
    tag_prefix = f"{os.getpid()}-".encode()
    real = subprocess._fork_exec  # type: ignore[attr-defined]

    def fork_then_signal(*args, **kwargs):
        pid = real(*args, **kwargs)
        started.append(pid)
        signal.raise_signal(sig)  # its handler runs here, before _fork_exec's caller sees the pid
        return pid

    started: list[int] = []
    monkeypatch.setattr(subprocess, "_fork_exec", fork_then_signal)
    # Python's own Ctrl-C handler, as in a terminal: a process started in the background (`cmd &` in a script, as CI
    # may run the tests) inherits SIGINT ignored, and Python then leaves it ignored.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with _process.interrupt_on_sigterm():
                try:
                    with _process.EngineProcess(["sleep", "600"]):
                        time.sleep(5)  # the interruption must arrive before this: the start is over
                    pytest.fail("the held signal was not delivered once the engine was registered")
                finally:
                    _process.stop_live()  # what the study and the command do on an interruption
        (pid,) = started
        assert not os.path.exists(f"/proc/{pid}") or "\nState:\tZ" in open(f"/proc/{pid}/status").read()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are back
        assert not [p for p in psutil.pids() if tag_prefix in _environ(p) and _process._live(p)]
    finally:
        signal.signal(signal.SIGINT, inherited)
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _environ(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return b""


def test_an_engine_receives_sigterm_when_it_is_stopped():
    from autotune.engines import process as _process

    with _process.EngineProcess([sys.executable, "-c", "import signal, sys, time\n"
                                 "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\ntime.sleep(600)"]) as proc:
        time.sleep(1.0)
        proc.stop(grace_s=10)
    assert proc.returncode == 7  # stopped gracefully (SIGTERM reached it), not SIGKILLed after the grace
