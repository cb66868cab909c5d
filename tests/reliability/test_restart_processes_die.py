"""Issue 44, principle 6: every process a restart started dies with it, including one that left its session AND
cleared its environment (``setsid env -i sleep 619``: no group, no tag to find it by). autotune is a child
subreaper, so such a process is re-parented to autotune: the restart's stop kills the children of autotune that are
new since the restart began and lie in another session (``engines.process.Adopted``).

Every process these tests look at or kill is one the test itself started (through its own engine wrapper, whose
daemons write their pids to a file the test reads); each is killed in ``finally`` only if it still runs ``sleep``
with the test's own marker, so a reused pid is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import yaml

from autotune.engines.process import EngineProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a Linux child subreaper")

REPO = Path(__file__).resolve().parents[2]
#: The daemon's sleep, a number no other test uses: the marker by which this test knows its own processes.
MARKER = "619.0442"


def _daemon_line(pidfile: Path) -> str:
    """Shell: a daemon that leaves the session and clears its environment, writing its pid, then sleeping."""
    return (f"setsid env -i sh -c 'echo $$ >> {pidfile}; exec sleep {MARKER}' </dev/null >/dev/null 2>&1 &")


def _ours(pid: int) -> bool:
    """``pid`` still runs this test's daemon (its own sleep, not a pid reused by something else)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and MARKER in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def _pids(pidfile: Path) -> list[int]:
    return [int(line) for line in pidfile.read_text().split()] if pidfile.exists() else []


def _cleanup(pidfile: Path) -> None:
    for pid in _pids(pidfile):
        if _ours(pid):
            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):  # re-parented to this process: its exit is ours
                os.waitpid(pid, 0)


def test_a_daemon_that_left_the_session_and_cleared_its_environment_dies_with_the_restart(tmp_path):
    """One :class:`EngineProcess` (a wrapper that starts two such daemons, one of them with a child of its own, and
    exits): after its stop, none of them runs, and they are reported."""
    pidfile = tmp_path / "daemons.pid"
    nested = (f"setsid env -i sh -c 'echo $$ >> {pidfile}; sh -c \"echo \\$\\$ >> {pidfile}; exec sleep {MARKER}\" "
              f"& exec sleep {MARKER}' </dev/null >/dev/null 2>&1 &")
    wrapper = f"{_daemon_line(pidfile)}\n{nested}\nsleep 0.3\n"
    try:
        with EngineProcess(["sh", "-c", wrapper]) as proc:
            proc.wait(timeout=30)
            deadline = time.monotonic() + 10
            while len(_pids(pidfile)) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            daemons = _pids(pidfile)
            assert len(daemons) == 3 and all(_ours(pid) for pid in daemons), daemons
        assert not [pid for pid in daemons if _ours(pid)], "a daemon outlived its restart"
        assert {s.pid for s in proc.survivors} >= set(daemons), "the daemons killed are reported"
    finally:
        _cleanup(pidfile)


def test_a_child_this_process_started_itself_is_not_taken_for_a_restarts_daemon(tmp_path):
    """What autotune (here: the test) starts itself while a restart runs is its own: a plain child in its session,
    and one in a session of its own that the test holds, live on through the restart's stop."""
    pidfile = tmp_path / "daemons.pid"
    plain = subprocess.Popen(["sleep", MARKER])
    try:
        with EngineProcess(["sh", "-c", f"{_daemon_line(pidfile)}\nsleep 0.3\n"]) as proc:
            proc.wait(timeout=30)
        assert plain.poll() is None, "the test's own child (its session) was killed by a restart's stop"
        assert not [pid for pid in _pids(pidfile) if _ours(pid)]
    finally:
        plain.kill()
        plain.wait()
        _cleanup(pidfile)


def test_a_cmd_engine_whose_wrapper_runs_setsid_env_i_leaves_nothing_after_autotune_exits(tmp_path):
    """The issue's case end to end: ``autotune tune`` with a cmd engine whose wrapper starts ``setsid env -i sleep``
    at every restart; once autotune has exited, none of those processes runs (before: every one of them did)."""
    pidfile = tmp_path / "daemons.pid"
    example = REPO / "examples" / "cmd_engine_example.py"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\n{_daemon_line(pidfile)}\nexec {sys.executable} {example} --profile h200\n")
    wrapper.chmod(0o755)
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "daemons", "engine": {"name": "cmd", "cmd": {"command": [str(wrapper)]}},
        "engine_args": {"model": "sim/dense-1b", "max_model_len": 4096},
        "workload": {"num_prompts": 8, "input_len": 64, "output_len": 64, "concurrency": 4, "timed_passes": 2},
        "search": {"cudagraph_mode": ["NONE", "FULL_AND_PIECEWISE"]},
    }, sort_keys=False))
    argv = [sys.executable, "-m", "autotune", "tune", "--space", str(space), "--trials", "2", "--no-verify",
            "--no-mlflow", "--quiet", "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir",
            str(tmp_path / "w"), "--study", "daemons"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode in (0, 4), done.stderr[-2000:]
        daemons = _pids(pidfile)
        assert len(daemons) >= 3, (daemons, done.stderr[-2000:])  # the baseline's restarts and a trial's at least
        time.sleep(0.2)
        alive = [pid for pid in daemons if _ours(pid)]
        assert not alive, f"{len(alive)} of {len(daemons)} daemons still run after autotune exited"
    finally:
        _cleanup(pidfile)


def test_the_wrapper_shape_leaves_its_daemon_running_without_a_subreaper(tmp_path):
    """The test's own check that its daemon really escapes group and tag: started by a plain ``Popen`` (no
    EngineProcess, no stop), the daemon outlives its wrapper, so the tests above would fail if autotune did not
    kill it."""
    pidfile = tmp_path / "daemons.pid"
    script = textwrap.dedent(f"""\
        import subprocess, sys
        subprocess.run(["sh", "-c", {_daemon_line(pidfile)!r} + "\\nsleep 0.3\\n"], check=True)
    """)
    try:
        subprocess.run([sys.executable, "-c", script], check=True, timeout=30, start_new_session=True)
        deadline = time.monotonic() + 10
        while not _pids(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        daemons = _pids(pidfile)
        assert daemons and all(_ours(pid) for pid in daemons)
        assert all(psutil.Process(pid).environ() == {} or "AUTOTUNE_PROCESS_TAG" not in psutil.Process(pid).environ()
                   for pid in daemons)
    finally:
        _cleanup(pidfile)
