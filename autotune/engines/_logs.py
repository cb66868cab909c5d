"""Engine logs written redacted: a process's output through a pipe that autotune writes line by line, each line
redacted first (:class:`RedactedLog`; through a named pipe for a process that opens its log by path), and a log a process wrote itself redacted in place once it is done
(:func:`scrub_log`). Kept apart from :mod:`autotune.engines.process`, which starts and stops the processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
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

    A process autotune does not start itself (a restart the forkserver forks, which opens its log by path) gets a
    ``named`` pipe instead: a FIFO in a private temporary directory (:attr:`writer_path`, handed to the process in
    place of the log's path), read by the same pump. Then the credential never reaches the disk either, and a
    kill -9 of autotune or of the restart mid-run leaves only redacted lines in the file (issue 44): the unredacted
    text never exists outside the two processes' memory.

    Args:
        path: The log file (created; truncated unless ``append``).
        append: Add to an existing file (a forkserver host's log across hosts).
        named: Read from a FIFO at :attr:`writer_path` rather than an unnamed pipe.
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool = False, named: bool = False) -> None:
        self.path = path
        self.writer_path: str | None = None
        self._fifo_dir: str | None = None
        # Never through a link (the log's directory was checked by its engine, core.confine; issue 44).
        self._file = open_confined(Path(path).parent, Path(path).name, "ab" if append else "wb")  # the pump closes it
        if named:
            self._fifo_dir = tempfile.mkdtemp(prefix="autotune-log-")  # 0700: no other user opens the FIFO
            self.writer_path = os.path.join(self._fifo_dir, "log")
            os.mkfifo(self.writer_path, 0o600)
            # Our reading end first (non-blocking: no writer yet), then a writing end we hold until finish(): the
            # process opens the FIFO whenever it gets to it, and until then the pump must not read end-of-file, nor
            # the process block in open() for want of a reader.
            self._read = os.open(self.writer_path, os.O_RDONLY | os.O_NONBLOCK)
            self.fd = os.open(self.writer_path, os.O_WRONLY)
            os.set_blocking(self._read, True)
        else:
            self._read, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, name="autotune-redacted-log", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The process holds its copy of the pipe: ours is closed, so the pump sees end-of-file with its last
        holder. Call once the process is started (or failed to start). A ``named`` log keeps its end until
        :meth:`finish`: the process opens the FIFO itself, later than its start."""
        if self.fd >= 0 and self.writer_path is None:
            os.close(self.fd)
            self.fd = -1

    def finish(self, timeout_s: float = _KILL_WAIT_S) -> None:
        """Wait until everything written is in the file (its writers are gone); bounded by ``timeout_s``. For a
        ``named`` log, call it once the process is stopped: its FIFO is removed."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._thread.join(timeout_s)
        if self._fifo_dir is not None:
            shutil.rmtree(self._fifo_dir, ignore_errors=True)
            self._fifo_dir = None

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
