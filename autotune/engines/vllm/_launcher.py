"""Run one engine process in its own session, with deadlines, and always leave nothing behind.

The engine process (and everything it spawns: compile workers, tokenizer pools, a container client) runs in a
fresh session, so it is its own process group and can be stopped as a whole with ``killpg``. Its stdout and
stderr go to a log file, never to a pipe, so a chatty engine cannot block on a full pipe buffer and the log
survives for the user.

Two monotonic deadlines apply: one for start-up (until the process prints a *ready* marker line) and one for
the measurement after that. The watcher polls the process too, so a crash is noticed at once instead of at
the deadline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.core.confine import open_confined
from autotune.core.failure import FailureKind
from autotune.engines.process import EngineProcess, RedactedLog, kill_group, scrub_log
from autotune.engines.vllm._wire import ERROR, READY, RESULT

__all__ = [
    "ERROR_MARKER",
    "READY_MARKER",
    "RESULT_MARKER",
    "LaunchResult",
    "kill_group",
    "launch",
    "supervise",
    "tail_text",
]

#: A line the engine process prints once it is ready to measure; the start-up deadline stops there.
READY_MARKER = READY
#: The line carrying the process's JSON result (the runner's :class:`._wire.RestartReply`).
RESULT_MARKER = RESULT
#: The line a process prints about its own failure (exception type and message) before exiting.
ERROR_MARKER = ERROR

_POLL_S = 0.2
_TAIL_LINES = 80
_TAIL_CHARS = 12_000


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """What happened to one launched process.

    Attributes:
        returncode: The process's exit status (negative: killed by that signal); ``None`` if it never started.
        timed_out: ``"startup"`` or ``"measure"`` when that deadline expired and the group was killed.
        ready: The JSON payload of the ready marker line, when the process printed one.
        result: The JSON payload of the result marker line, when the process printed one.
        failure: The JSON payload of the error marker line, when the process printed one.
        startup_s: Seconds from launch to the ready marker (``None`` if never ready).
        wall_s: Seconds from launch until the whole process group was gone.
        log_path: The log file (stdout and stderr together).
        tail: The last lines of the log.
        error: Why the process could not be started at all, or was lost (``None`` otherwise).
        failure_kind: The kind of :attr:`error` when the launcher knows it (a restart lost with its forkserver host).
    """

    returncode: int | None
    timed_out: str | None = None
    ready: Mapping[str, Any] | None = None
    result: Mapping[str, Any] | None = None
    failure: Mapping[str, Any] | None = None
    startup_s: float | None = None
    wall_s: float = 0.0
    log_path: str = ""
    tail: str = ""
    error: str | None = None
    failure_kind: FailureKind | None = None


def tail_text(text: str, lines: int = _TAIL_LINES, chars: int = _TAIL_CHARS) -> str:
    """The last ``lines`` lines of ``text``, at most ``chars`` characters.

    Progress bars rewrite one line with carriage returns; only the last state of each line is kept, so a
    tail shows what the user would have seen on a terminal.
    """
    clean = [line.rsplit("\r", 1)[-1] for line in text.rstrip("\n").split("\n")]
    out = "\n".join(clean[-lines:])
    return out[-chars:]


class _LogWatcher:
    """Reads a growing log file incrementally and picks out the marker lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""
        self.ready: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.failure: dict[str, Any] | None = None

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return
        if not chunk:
            return
        self.offset += len(chunk)
        text = self.partial + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        for line in lines:
            self._scan(line)

    def finish(self) -> None:
        self.poll()
        if self.partial:
            self._scan(self.partial)
            self.partial = ""

    def _scan(self, line: str) -> None:
        line = line.rsplit("\r", 1)[-1].strip()
        # A marker may follow output a child process left without a final newline: look anywhere in the line.
        if self.ready is None and (payload := _marker_payload(line, READY_MARKER)) is not None:
            self.ready = payload
        elif (payload := _marker_payload(line, RESULT_MARKER)) is not None:
            self.result = payload
        elif (payload := _marker_payload(line, ERROR_MARKER)) is not None:
            self.failure = payload


def _marker_payload(line: str, marker: str) -> dict[str, Any] | None:
    """The JSON object after ``marker`` in ``line``, ``None`` when the line has no such marker."""
    pos = line.find(marker + " {")
    if pos < 0:
        return None
    text = line[pos + len(marker) + 1 :]
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        return {"unparsable": text[:500]}
    return payload if isinstance(payload, dict) else {"value": payload}


def launch(
    argv: Sequence[str],
    *,
    log_path: str | os.PathLike[str],
    startup_timeout_s: float,
    measure_timeout_s: float,
    env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
    cwd: str | None = None,
    kill_grace_s: float = 5.0,
) -> LaunchResult:
    """Run ``argv`` in a new session, watch its log against the deadlines, and stop its whole group.

    The start-up deadline runs from launch until the process prints ``AUTOTUNE_READY {...}``; the
    measurement deadline runs from there. When either expires the group is killed and ``timed_out`` names
    the phase. Whatever happens, no process of the group is left running when this returns.

    Args:
        argv: The command (e.g. ``[python, runner.py]`` or a container prefix plus those).
        log_path: File that receives stdout and stderr (truncated first).
        startup_timeout_s: Seconds allowed until the ready marker.
        measure_timeout_s: Seconds allowed after the ready marker.
        env: The complete environment for the process (``None``: inherit ours).
        stdin_text: Text written to the process's stdin (via a file, so a slow reader cannot block us).
        cwd: Working directory.
        kill_grace_s: Seconds between SIGTERM and SIGKILL.

    Returns:
        A :class:`LaunchResult`; launching errors (missing executable) are reported in ``error``, not raised.
    """
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # The request (which holds the credentials the engine runs with) goes through an unnamed temporary file, never
    # a file in the study's directory; the output reaches the log only redacted (RedactedLog).
    sink = RedactedLog(log)
    try:
        with tempfile.TemporaryFile() as in_fh:
            in_fh.write((stdin_text or "").encode("utf-8"))
            in_fh.seek(0)
            proc = EngineProcess(argv, stdin=in_fh, stdout=sink.fd, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    except OSError as exc:
        sink.finish()
        return LaunchResult(returncode=None, log_path=str(log), error=f"cannot start {argv[0]!r}: {exc.strerror or exc}")
    finally:
        sink.started()
    return supervise(proc, log, start, startup_timeout_s=startup_timeout_s, measure_timeout_s=measure_timeout_s,
                     kill_grace_s=kill_grace_s, sink=sink)


def supervise(
    proc: Any,
    log: Path,
    start: float,
    *,
    startup_timeout_s: float,
    measure_timeout_s: float,
    kill_grace_s: float = 5.0,
    sink: RedactedLog | None = None,
) -> LaunchResult:
    """Watch a started process's log against the deadlines, then stop its whole group (see :func:`launch`).

    Args:
        proc: An :class:`~autotune.engines.process.EngineProcess`, or anything with its surface (``pid``, also
            the group id; ``poll``, ``wait``, ``returncode``, ``stop(grace_s)``, a context manager): a forked
            restart (:class:`~._forkserver.ForkedProcess`).
        log: The file receiving its stdout and stderr.
        start: ``time.monotonic()`` when the start was asked for; start-up seconds count from here.
        sink: The :class:`~autotune.engines.process.RedactedLog` the process writes ``log`` through; without one
            (a forked restart opens its log itself) the log is redacted in place once the process is stopped.
    """
    watcher = _LogWatcher(log)
    # Leaving the block by any route (a deadline, Ctrl-C, SIGTERM, an error) stops the group: the engine is in
    # its own session and would outlive us.
    with proc:
        timed_out, ready_at = _watch(proc, watcher, start, startup_timeout_s, measure_timeout_s)
        survivors = proc.stop(grace_s=kill_grace_s)
    if sink is not None:
        sink.finish()  # every writer is gone: the log is whole, and was redacted line by line
    else:
        scrub_log(log)
    if survivors:
        with open_confined(log.parent, log.name, "a") as fh:
            fh.write(f"\nautotune: killed {len(survivors)} process(es) that had left the engine's process group: "
                     f"{', '.join(map(str, survivors))}\n")
    watcher.finish()
    text = log.read_text(errors="replace") if log.exists() else ""
    return LaunchResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        ready=watcher.ready,
        result=watcher.result,
        failure=watcher.failure,
        startup_s=None if ready_at is None else ready_at - start,
        wall_s=time.monotonic() - start,
        log_path=str(log),
        tail=tail_text(text),
    )


def _watch(
    proc: EngineProcess | Any,
    watcher: _LogWatcher,
    start: float,
    startup_timeout_s: float,
    measure_timeout_s: float,
) -> tuple[str | None, float | None]:
    """Poll until the process exits or a deadline passes; returns (expired phase or None, ready time)."""
    ready_at: float | None = None
    while True:
        watcher.poll()
        now = time.monotonic()
        if ready_at is None and watcher.ready is not None:
            ready_at = now
        if proc.poll() is not None:
            return None, ready_at
        if ready_at is None and now - start > startup_timeout_s:
            return "startup", None
        if ready_at is not None and now - ready_at > measure_timeout_s:
            return "measure", ready_at
        time.sleep(_POLL_S)
