"""The forkserver host: runs in the engine's interpreter for the engine's lifetime and forks each restart.

Executed by path (``python _host.py``) in the interpreter that holds vLLM, like ``_runner.py``, so it imports
only the standard library; vLLM and torch are imported once, by Python's own forkserver
(``multiprocessing.get_context("forkserver")`` with :data:`PRELOAD`), which never initialises CUDA. Each
restart is a ``Process`` of that context: a fresh fork of the forkserver that calls
``_runner.forked_main``, which makes it a session leader (its own process group), points its stdout and stderr
at the restart's log file and runs the same code a spawned runner runs. CUDA is initialised in the restart, so
every restart gets its own CUDA context and kernel selection.

Protocol: one JSON object a line. Requests on stdin::

    {"op": "start", "id": 1, "request": {...}, "log_path": "...", "env": {...}}
    {"op": "stop"}

Events on the stdout this process was started with (everything else it or the forkserver prints goes to
stderr, the host log)::

    {"event": "ready", "pid": 123, "python": "3.12.3", "preload": [...]}
    {"event": "started", "id": 1, "pid": 456}
    {"event": "start_failed", "id": 1, "error": "..."}
    {"event": "exited", "id": 1, "pid": 456, "exitcode": 0}

End of stdin (autotune exited, however it died), ``stop``, SIGTERM or SIGINT: every running restart's process
group is stopped (SIGTERM, then SIGKILL), then the host exits; the forkserver exits once no process holds its
"alive" pipe.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.util
import os
import shutil
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

#: Modules the forkserver imports once. The top-level ``vllm`` package alone loads its names lazily, so the
#: modules a restart really needs are named; none of them initialises CUDA.
PRELOAD = ["torch", "vllm", "vllm.entrypoints.llm", "vllm.sampling_params", "vllm.v1.engine.llm_engine", "_runner"]
#: Seconds a new restart gets to become a session leader before the host reports it anyway.
_SETSID_WAIT_S = 30.0
_KILL_GRACE_S = 5.0


class _Stop(Exception):
    """SIGTERM or SIGINT reached the host."""


def _on_signal(signum: int, frame: Any) -> None:
    raise _Stop(signum)


class Host:
    """The forkserver context, the running restarts and the event channel."""

    def __init__(self, events_fd: int) -> None:
        self.events = os.fdopen(events_fd, "w", buffering=1)
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(PRELOAD)
        self.children: dict[int, Any] = {}  # request id -> Process
        self.buffer = b""
        self.temp_dir: str | None = None

    def send(self, payload: dict[str, Any]) -> None:
        self.events.write(json.dumps(payload) + "\n")
        self.events.flush()

    def start_forkserver(self) -> None:
        # Start it now, so the preload runs while autotune prepares the first restart; a restart that arrives
        # earlier waits for it inside Process.start().
        multiprocessing.forkserver.ensure_running()
        # The forkserver's socket lies in a directory multiprocessing made for this process (pymp-*, under
        # TMPDIR). Its exit hook would remove it, but the host ends with os._exit, so the host removes it itself.
        self.temp_dir = multiprocessing.util.get_temp_dir()
        self.send({"event": "ready", "pid": os.getpid(), "python": sys.version.split()[0], "preload": PRELOAD})

    def serve(self) -> None:
        """Answer requests and report exits until stdin ends or ``stop`` arrives."""
        while True:
            sentinels = {p.sentinel: rid for rid, p in self.children.items()}
            ready = multiprocessing.connection.wait([0, *sentinels], timeout=None)
            for item in ready:
                if item == 0:
                    if not self.read_requests():
                        return
                else:
                    self.reap(sentinels[item])

    def read_requests(self) -> bool:
        """Handle every complete request line on stdin; ``False`` at end of input or on ``stop``."""
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return False
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            message = json.loads(line)
            if message.get("op") == "stop":
                return False
            if message.get("op") == "start":
                self.start(message)
        return True

    def start(self, message: dict[str, Any]) -> None:
        # The restart's target is pickled by reference: importable here (this script's folder) and in the
        # forkserver, which gets this process's sys.path and preloads it.
        if TYPE_CHECKING:  # the type checker reads the sibling under the package it sits in
            from autotune.engines.vllm import _runner
        else:
            import _runner

        rid = int(message["id"])
        try:
            proc = self.ctx.Process(target=_runner.forked_main, name=f"autotune-restart-{rid}",
                                    args=(message["request"], message["log_path"], message["env"]))
            proc.start()
        except Exception as exc:  # noqa: BLE001 - reported to autotune as this restart's failure
            traceback.print_exc()
            self.send({"event": "start_failed", "id": rid, "error": f"{type(exc).__name__}: {exc}"})
            return
        self.children[rid] = proc
        _wait_for_own_session(proc)
        self.send({"event": "started", "id": rid, "pid": proc.pid})

    def reap(self, rid: int) -> None:
        proc = self.children.pop(rid)
        proc.join()
        self.send({"event": "exited", "id": rid, "pid": proc.pid, "exitcode": proc.exitcode})

    def stop_children(self) -> None:
        """Stop every running restart's whole process group (SIGTERM, then SIGKILL)."""
        for proc in self.children.values():
            _killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + _KILL_GRACE_S
        for proc in self.children.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.children.values():
            # Grandchildren that ignored SIGTERM are still in the group even when the restart itself is gone.
            _killpg(proc.pid, signal.SIGKILL)
            proc.join(5.0)
        self.children.clear()

    def remove_temp_dir(self) -> None:
        """Remove the forkserver's socket directory (the forkserver, already forked, no longer needs its path)."""
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None


def _wait_for_own_session(proc: Any) -> None:
    """Wait until the restart is its own session leader, so that killing its group by pid reaches it."""
    deadline = time.monotonic() + _SETSID_WAIT_S
    while time.monotonic() < deadline and proc.exitcode is None:
        try:
            if os.getsid(proc.pid) == proc.pid:
                return
        except ProcessLookupError:
            return
        time.sleep(0.002)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main() -> int:
    # The event channel is a private copy of the stdout pipe; fd 1 becomes the host log (stderr), so nothing
    # that the host, the forkserver or an imported module prints can corrupt the channel. os.dup's copy is not
    # inheritable: the forkserver and the restarts never hold it, so its end means this process ended.
    events_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    host = Host(events_fd)
    code = 0
    try:
        host.start_forkserver()
        host.serve()
    except _Stop:
        pass
    except Exception:  # noqa: BLE001 - the host log must say why; autotune sees the channel end
        traceback.print_exc()
        code = 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        host.stop_children()
        host.remove_temp_dir()
    sys.stderr.flush()
    # os._exit: multiprocessing's exit hooks would join children the host already stopped.
    os._exit(code)


if __name__ == "__main__":
    main()
