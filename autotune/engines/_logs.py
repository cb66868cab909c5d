"""Engine logs written redacted: a process's output through a pipe that autotune writes line by line, each line
redacted first (:class:`RedactedLog`), and a log a process wrote itself redacted in place once it is done
(:func:`scrub_log`). Kept apart from :mod:`autotune.engines.process`, which starts and stops the processes."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from autotune.core.confine import open_confined
from autotune.core.redact import redact_text

__all__ = ["RedactedLog", "scrub_log"]

#: How long :meth:`RedactedLog.finish` waits for its writers by default (the group stop's own wait).
_KILL_WAIT_S = 5.0


#: A line longer than this is written in parts (its last :data:`_LOG_OVERLAP` bytes held back for the next part,
#: so a credential across the cut is still whole in one of them); a progress bar with no newline is one such line.
_LOG_LINE_MAX = 1 << 20
_LOG_OVERLAP = 4096


class RedactedLog:
    """A log file an engine process writes through autotune: its stdout/stderr is a pipe (:attr:`fd`), and a thread
    writes what comes out of it to ``path`` line by line, each line redacted first (:func:`redact_text`: credential
    pairs and flags, token shapes, and the value of every ``${VAR}`` resolved for the engine). So a credential the
    engine echoes (vLLM prints its non-default arguments) never reaches the file, not even while the engine runs.

    The thread drains the pipe continuously, so a chatty engine never blocks on it; it ends when every process
    holding the pipe is gone (the group stop kills them all), and :meth:`finish` waits for it.

    Args:
        path: The log file (created; truncated unless ``append``).
        append: Add to an existing file (a forkserver host's log across hosts).
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = False) -> None:
        self.path = path
        # Never through a link (the log's directory was checked by its engine, core.confine; issue 44).
        self._file = open_confined(Path(path).parent, Path(path).name, "ab" if append else "wb")  # the pump closes it
        self._read, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, name="autotune-redacted-log", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The process holds its copy of the pipe: ours is closed, so the pump sees end-of-file with its last
        holder. Call once the process is started (or failed to start)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def finish(self, timeout_s: float = _KILL_WAIT_S) -> None:
        """Wait until everything written is in the file (its writers are gone); bounded by ``timeout_s``."""
        self.started()
        self._thread.join(timeout_s)

    def _pump(self) -> None:
        held = b""
        try:
            while chunk := os.read(self._read, 1 << 16):
                held += chunk
                cut = held.rfind(b"\n") + 1
                if not cut and len(held) > _LOG_LINE_MAX:
                    cut = len(held) - _LOG_OVERLAP
                if cut:
                    self._write(held[:cut])
                    held = held[cut:]
            self._write(held)
        finally:
            os.close(self._read)
            with contextlib.suppress(OSError):
                self._file.close()

    def _write(self, data: bytes) -> None:
        if not data or self._file.closed:
            return
        try:
            self._file.write(redact_text(data.decode("utf-8", errors="replace")).encode("utf-8"))
            self._file.flush()
        except OSError:
            # The file system refused (a full disk): the log ends here, but the pipe is still drained, so the
            # engine never blocks on it or dies of a broken pipe.
            with contextlib.suppress(OSError):
                self._file.close()


def scrub_log(path: str | os.PathLike[str]) -> None:
    """Redact a log file in place that a process wrote directly (a restart forked by the forkserver host opens its
    log itself): what autotune reads, tails and logs from it afterwards is redacted. Missing or unreadable: left."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
        clean = redact_text(text)
        if clean != text:
            with open(path, "wb") as fh:
                fh.write(clean.encode("utf-8"))
    except OSError:
        pass
