"""Opening a file the user names (the space file, a dataset, a report JSON): a regular file, read to a bound.

A FIFO blocks ``open()`` until some writer comes, a wait with no bound; ``/dev/zero`` or ``/dev/urandom`` never end,
and reading one whole takes memory until the machine has none; a regular file far larger than any input of its kind
is a wrong path, not an input. Each is refused at once with :class:`InputFileError` (its ``problem`` and ``fix``),
which the reader turns into its own one line naming the file (issue 32). A missing file, a directory or one that
cannot be read raise the usual :class:`OSError` subclasses, which the readers already name.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from typing import Any, BinaryIO

__all__ = ["MAX_JSON_DEPTH", "InputFileError", "open_input", "parse_json", "read_input"]

MIB = 1024 * 1024
#: The deepest nesting a JSON input may have: a report is about eight levels deep, an engine's result or a dataset
#: row fewer; ``[[[[...]]]]`` a hundred thousand deep is no input autotune reads, and every reader (the JSON
#: decoder, pydantic, redaction) would recurse through it until Python's stack limit (RecursionError).
MAX_JSON_DEPTH = 64


class InputFileError(OSError):
    """A path that names no regular file, or one above the size its kind of input may have."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_input(path: str | os.PathLike[str], limit: int) -> BinaryIO:
    """``path`` opened for reading, binary; refused unless a regular file of at most ``limit`` bytes.

    Opened without blocking (a FIFO with no writer would hold ``open`` forever), then checked on the open file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd)
        if stat.S_ISDIR(mode.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode.st_mode):
            raise InputFileError(f"is {_kind(mode.st_mode)}, not a file", "pass a regular file (copy the data into "
                                 "one): autotune reads its inputs whole, before anything runs")
        if mode.st_size > limit:
            raise InputFileError(f"is {mode.st_size / MIB:.0f} MiB, more than the {limit // MIB} MiB such a file may "
                                 "have", "check the path (is it the right file?), or make the file smaller")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path`` (:func:`open_input`), at most ``limit`` of them even if the file grows meanwhile."""
    with open_input(path, limit) as fh:
        body = fh.read(limit + 1)
    if len(body) > limit:
        raise InputFileError(f"grew past the {limit // MIB} MiB such a file may have while it was read",
                             "pass a file that is not being written")
    return body


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refusing JSON nested deeper than ``max_depth`` (issue 44: ``report --from-json`` of
    ``[[[[...]]]]`` was a RecursionError traceback).

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``), or nested too deeply (the message says how deep may be).
    """
    too_deep = ValueError(f"nested deeper than {max_depth} levels, which no input autotune reads is")
    try:
        data = json.loads(text)
    except RecursionError:
        raise too_deep from None
    stack = [(data, 1)]
    while stack:  # without recursion: the check must not be what overflows
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > max_depth:
                raise too_deep
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return data
