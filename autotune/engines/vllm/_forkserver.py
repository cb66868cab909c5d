"""autotune's side of the forkserver host (``_host.py``): start it, ask it for restarts, notice when it dies.

The host runs in the engine's interpreter, in a session of its own, for the engine's lifetime. autotune talks to
it over two pipes (JSON lines: requests on its stdin, events on its stdout; its stderr is the host log). A reader
thread turns events into state, so :class:`ForkedProcess` can be polled like a ``subprocess.Popen`` and the
launcher supervises a forked restart with the same deadlines and group kills as a spawned one.

autotune's end of the request pipe is the host's lifeline: when autotune exits in any way (even SIGKILL) the
host reads end-of-file, stops every running restart's group and exits, and the forkserver follows it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from autotune.core.failure import LOST_PREFIX, FailureKind
from autotune.engines.process import (TAG_ENV, Adopted, EngineProcess, RedactedLog, Survivor, kill_group, new_tag,
                                      process_name, tagged_processes, wait_gone)
from autotune.engines.vllm._launcher import LaunchResult, supervise, tail_text

__all__ = ["HOST_PATH", "ForkHost", "ForkedProcess", "HostError", "HostLost", "HostTimeout", "launch_forked"]

#: The host script, executed by path in the engine's interpreter (it imports only the standard library).
HOST_PATH = Path(__file__).resolve().with_name("_host.py")
_STOP_GRACE_S = 10.0
#: How long a restart's group gets between SIGTERM and SIGKILL.
_KILL_GRACE_S = 5.0


class HostError(Exception):
    """The forkserver host is gone or cannot start a restart; the message is a one-line reason."""


class HostTimeout(HostError):
    """The host did not fork the restart before the start-up deadline (it has been stopped)."""


class HostLost(HostError):
    """The host died after the restart was requested, before it reported the restart's pid; the message is why.

    Whatever it had forked for the restart has been stopped, as for a restart whose host dies while it runs
    (:attr:`ForkedProcess.lost`).
    """


class ForkHost:
    """One forkserver host process (see the module docstring).

    Args:
        interpreter: The engine's interpreter (a local executable: a launcher cannot fork).
        env: The host's environment; the forkserver inherits it and imports vLLM under it.
        log_path: The host log (its stderr and whatever the forkserver prints while importing).
    """

    def __init__(self, interpreter: Sequence[str], env: Mapping[str, str], log_path: str | os.PathLike[str]) -> None:
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._cond = threading.Condition()
        self._events: dict[int, dict[str, Any]] = {}  # request id -> its latest event
        self._ready: dict[str, Any] | None = None
        self._gone: str | None = None
        self._next_id = 0
        self._stopped = False
        # The host log reaches its file redacted (RedactedLog); the pump ends when the host and its forks are gone.
        self._log = RedactedLog(self.log_path, append=True)
        try:
            # An EngineProcess: its own session, and whatever it (or the forkserver) leaves behind is found and
            # stopped with it.
            self.process = EngineProcess([*interpreter, str(HOST_PATH)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log.fd, env=env)
        finally:
            self._log.started()
        self.proc = self.process.popen
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: IO[bytes] = self.proc.stdin
        self._reader = threading.Thread(target=self._read_events, args=(self.proc.stdout,),
                                        name="autotune-forkserver-events", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        with self._cond:
            return self._gone is None

    def gone_reason(self) -> str | None:
        with self._cond:
            return self._gone

    # -- requests ---------------------------------------------------------------------------------------
    def start(self, request: Mapping[str, Any], log_path: str, env: Mapping[str, str],
              timeout_s: float, kill_grace_s: float = _KILL_GRACE_S) -> ForkedProcess:
        """Fork one restart with environment ``env`` and return it once it runs in its own session.

        ``timeout_s`` bounds the wait (the first restart waits for the forkserver's imports); ``kill_grace_s`` is
        the SIGTERM grace of whatever is stopped when the restart cannot be handed back.

        Whenever no :class:`ForkedProcess` comes back, nothing of the restart is left running: the host may have
        forked it before it died, stalled or failed, and only the restart's tag names it then (see
        :func:`_stop_unreported`).

        Raises:
            HostLost: the host died after the request was sent (it is stopped).
            HostTimeout: the host did not answer in time (it is stopped).
            HostError: the host was gone before the request, or refused the restart.
        """
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        tag = new_tag()
        env = {**env, TAG_ENV: tag}
        self._send({"op": "start", "id": rid, "request": dict(request), "log_path": str(log_path), "env": env})
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while rid not in self._events and self._gone is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
            event = self._events.get(rid)
            gone = self._gone
        if event is None:
            # Stuck (an import that hangs) or dead, maybe after it forked the restart (a loaded machine can run the
            # restart well past the fork before the host reports it). Stopping the host also kills the restart
            # itself: a fork of the forkserver shows the environment the forkserver was started with, the host's
            # tag included, and has left the host's session; what the restart started carries its own tag.
            self.stop()
            _stop_unreported(tag, kill_grace_s)
            if gone is None:
                raise HostTimeout(f"the forkserver host did not fork the restart within {timeout_s:g} s "
                                  f"(its log: {self.log_path})")
            raise HostLost(gone)
        if event["event"] == "start_failed":
            _stop_unreported(tag, kill_grace_s)  # a failure after the fork: whatever the restart started
            raise HostError(f"the forkserver host could not start the restart: {event.get('error')}")
        return ForkedProcess(self, rid, int(event["pid"]), tag)

    def exit_event(self, rid: int) -> dict[str, Any] | None:
        with self._cond:
            event = self._events.get(rid)
            return event if event is not None and event["event"] == "exited" else None

    def wait_event(self, rid: int, timeout_s: float | None) -> None:
        """Block until restart ``rid`` exited, the host is gone, or ``timeout_s`` passed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._gone is None and (self._events.get(rid) or {}).get("event") != "exited":
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._cond.wait(1.0 if left is None else min(left, 1.0))

    def wait_ready(self, timeout_s: float) -> dict[str, Any] | None:
        """The host's ``ready`` event (the forkserver is running), ``None`` if it did not come in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._ready is None and self._gone is None and time.monotonic() < deadline:
                self._cond.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            return self._ready

    def stop(self) -> None:
        """Ask the host to stop its restarts and exit, then stop whatever is left of its process group.

        The forkserver and multiprocessing's resource tracker are in the host's group (it is the session leader).
        Stopping a stopped host does nothing.
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            self._send({"op": "stop"})
            self._stdin.close()
        except (HostError, OSError):
            pass
        try:
            self.proc.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        # The forkserver and the resource tracker are in the host's group; SIGTERM, then SIGKILL, for what is left.
        self.process.stop()
        self._reader.join(timeout=5.0)

    # -- internals --------------------------------------------------------------------------------------
    def _send(self, message: Mapping[str, Any]) -> None:
        if not self.alive():
            raise HostError(self.gone_reason() or "the forkserver host is gone")
        try:
            self._stdin.write((json.dumps(message, default=str) + "\n").encode())
            self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise HostError(f"the forkserver host is gone ({exc.__class__.__name__}; its log: {self.log_path})") \
                from None

    def _read_events(self, stream: IO[bytes]) -> None:
        for raw in stream:
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                continue
            with self._cond:
                if event.get("event") == "ready":
                    self._ready = event
                elif "id" in event:
                    self._events[int(event["id"])] = event
                self._cond.notify_all()
        # End of the channel: the host exited (or closed it, which it only does by exiting).
        code = self.proc.wait()
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        last = tail_text(log, lines=1).strip()
        why = f"the forkserver host exited with status {code}"
        if last:
            why += f" ({last[:300]})"
        with self._cond:
            self._gone = f"{why}; its log: {self.log_path}"
            self._cond.notify_all()


class ForkedProcess:
    """A restart forked by a :class:`ForkHost`, with the :class:`~autotune.engines.process.EngineProcess`
    surface the launcher uses (``poll``, ``wait``, ``stop``, a context manager that stops it).

    ``pid`` is also its process group id (the restart called ``setsid`` before the host reported it). Its
    environment carries ``tag`` (:data:`~autotune.engines.process.TAG_ENV`), which every process it starts
    inherits, so descendants that leave its group are found and stopped as for a spawned engine. When the host
    dies first, the restart is unsupervised: :meth:`poll` stops its group and reports :attr:`lost` (the reason),
    with ``returncode`` -9.
    """

    def __init__(self, host: ForkHost, rid: int, pid: int, tag: str) -> None:
        self.host = host
        self.rid = rid
        self.pid = pid
        self.tag = tag
        self.returncode: int | None = None
        self.lost: str | None = None
        self.survivors: list[Survivor] = []
        self._stopped = False
        # A descendant that leaves the session and clears the tag comes to us, the subreaper, once its parents are
        # gone: known by being a new child of ours (engines.process.Adopted, issue 44).
        self.adopted = Adopted()

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, grace_s: float = _KILL_GRACE_S) -> list[Survivor]:
        """Stop the restart and its group (SIGTERM, ``grace_s``, SIGKILL), then kill descendants that left it.

        Safe to call twice; returns those descendants (the forkserver, the restart's parent, reaps the restart).
        """
        if self._stopped:
            return self.survivors
        seen = set(tagged_processes(self.tag))
        if self.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.wait()
        self.survivors = _stop_tagged(self.tag, [self.pid], grace_s, seen)
        self.survivors += self.adopted.kill(exclude={self.pid, self.host.process.pid})
        self._stopped = True
        return self.survivors

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        event = self.host.exit_event(self.rid)
        if event is not None:
            self.returncode = int(event["exitcode"]) if event.get("exitcode") is not None else -9
            return self.returncode
        reason = self.host.gone_reason()
        if reason is not None:
            kill_group(self.pid)
            self.lost = reason
            self.returncode = -9
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.host.wait_event(self.rid, timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"restart {self.rid} (pid {self.pid})", timeout or 0.0)
        return code


def _stop_tagged(tag: str, groups: Collection[int], grace_s: float, seen: Collection[int] = ()) -> list[Survivor]:
    """Stop the process groups ``groups`` (SIGTERM, up to ``grace_s``, SIGKILL), then SIGKILL every process still
    carrying ``tag`` (it left them) and wait until those are gone; reap whichever of them, and of ``seen``, were
    re-parented to us. Returns the processes killed by their tag."""
    for pgid in groups:
        kill_group(pgid, grace_s=grace_s)
    survivors: list[Survivor] = []
    for pid in tagged_processes(tag):
        if pid in groups:
            continue
        name = process_name(pid)
        if name is None:
            continue  # gone already
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            survivors.append(Survivor(pid, name))
    wait_gone([s.pid for s in survivors])
    for pid in {*groups, *seen, *(s.pid for s in survivors)}:
        # Re-parented to us when autotune is a child subreaper: collect their exit so no zombie stays.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return survivors


def _stop_unreported(tag: str, grace_s: float) -> list[Survivor]:
    """Stop what a restart the host never reported started: no :class:`ForkedProcess` knows its pid, but every
    process it started carries its ``tag``, in its group and session (the restart leads both: their id is its
    pid), or in groups and sessions of their own. Those groups are stopped, then whatever still carries the tag."""
    seen = set(tagged_processes(tag))
    groups: set[int] = set()
    for pid in seen:
        for of in (os.getpgid, os.getsid):
            with contextlib.suppress(OSError):
                groups.add(of(pid))
    groups -= {0, 1, os.getpgrp(), os.getsid(0)}  # never ours: an engine process lives in a session of its own
    return _stop_tagged(tag, sorted(groups), grace_s, seen)


def launch_forked(
    host: ForkHost,
    request: Mapping[str, Any],
    *,
    log_path: str | os.PathLike[str],
    env: Mapping[str, str],
    startup_timeout_s: float,
    measure_timeout_s: float,
    kill_grace_s: float = _KILL_GRACE_S,
) -> LaunchResult:
    """Fork one restart from ``host`` and supervise it exactly as :func:`~._launcher.launch` does a spawned one.

    Start-up seconds count from the request to the ready marker, as for a spawned restart. A host that is
    gone, refuses, or dies while the restart runs makes a :class:`LaunchResult` with ``error`` set (the restart
    fails with that reason; its process group is stopped either way). A host that dies after the request is
    ``restart lost: <why>`` whether or not it had reported the restart's pid.
    """
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    # The restart opens its log by path; it is handed a named pipe instead, whose lines autotune writes to the log
    # redacted (RedactedLog, opened confined): a credential the restart prints never reaches the disk, even if
    # autotune or the restart is killed mid-run (issue 44).
    sink = RedactedLog(log, named=True)
    start = time.monotonic()
    try:
        proc = host.start(request, str(sink.writer_path), env, timeout_s=startup_timeout_s,
                          kill_grace_s=kill_grace_s)
    except HostError as exc:
        sink.finish()  # host.start stopped whatever it forked: every line the restart wrote is in the log
        if isinstance(exc, HostTimeout):
            # The start-up deadline passed before the host reported the restart: a start-up timeout like any
            # other; the tail shows what the host (importing vLLM, say) was doing.
            host_log = host.log_path.read_text(errors="replace") if host.log_path.exists() else ""
            return LaunchResult(returncode=None, timed_out="startup", log_path=str(log),
                                wall_s=time.monotonic() - start, tail=tail_text(f"{host_log}\n{exc}"))
        if isinstance(exc, HostLost):
            return LaunchResult(returncode=None, log_path=str(log), error=f"{LOST_PREFIX} {exc}",
                                failure_kind=FailureKind.LOST, wall_s=time.monotonic() - start)
        return LaunchResult(returncode=None, log_path=str(log), error=str(exc), wall_s=time.monotonic() - start)
    outcome = supervise(proc, log, start, startup_timeout_s=startup_timeout_s, measure_timeout_s=measure_timeout_s,
                        kill_grace_s=kill_grace_s, sink=sink)
    if proc.lost is not None:
        return dataclasses.replace(outcome, error=f"{LOST_PREFIX} {proc.lost}", failure_kind=FailureKind.LOST)
    return outcome
