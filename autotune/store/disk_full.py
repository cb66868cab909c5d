"""A full disk under the study's storage or workdir: one line naming which and the fix, never a traceback.

Issue 22 (FS01, FS04). A write that fails for lack of space surfaces as many different exceptions: an
``OSError`` with ``ENOSPC`` (no space), ``EDQUOT`` (quota) or ``EFBIG`` (a file-size limit) from autotune's own
files, or SQLite's ``SQLITE_FULL`` / ``SQLITE_IOERR_WRITE`` wrapped by SQLAlchemy and then by Optuna's
``StorageInternalError`` (whose own text blames "invalid data"). :func:`disk_full_line` walks an exception's chain
(``__cause__``, ``__context__``, SQLAlchemy's ``orig``) for the first of those and says where the write went.

Nothing is lost by stopping there: every restart is saved as it lands, and the trial that was running is failed
and queued again (with what it measured) by the next run's stale-trial check, so the same command resumes.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator

from autotune.core.redact import redact_text
from autotune.core.urls import redact_url, sqlite_path

__all__ = ["DiskFull", "disk_full_line", "raise_if_disk_full"]

#: errno values that mean "no room to write": the disk, the user's quota, or a file-size limit (``ulimit -f``).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

#: SQLite's extended result codes for a write that did not land. ``SQLITE_FULL`` is SQLite's own word for ENOSPC;
#: other write errors (EFBIG, EDQUOT, EIO) all become ``SQLITE_IOERR_WRITE`` and friends, so the line names both
#: causes rather than guess.
_SQLITE_FULL = "SQLITE_FULL"
_SQLITE_WRITE_ERRORS = frozenset({"SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_DIR_FSYNC",
                                  "SQLITE_IOERR_TRUNCATE", "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_NOMEM"})


class DiskFull(Exception):
    """A write failed for lack of space; the message is the one line to print (exit status ``ERROR``)."""


def raise_if_disk_full(exc: BaseException, *, storage: object = None, workdir: str | None = None) -> None:
    """Raise :class:`DiskFull` (from ``exc``) when ``exc`` is a write that failed for lack of space."""
    line = disk_full_line(exc, storage=storage, workdir=workdir)
    if line is not None:
        raise DiskFull(line) from exc


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for nxt in (getattr(e, "orig", None), e.__cause__, e.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def _inside(path: str, tree: str) -> bool:
    path, tree = os.path.realpath(path), os.path.realpath(tree)
    return path == tree or path.startswith(tree.rstrip(os.sep) + os.sep)


def disk_full_line(exc: BaseException, *, storage: object = None, workdir: str | None = None) -> str | None:
    """One line for ``exc`` if a write failed for lack of space somewhere in its chain, else ``None``.

    Args:
        exc: What the command raised.
        storage: The ``--storage`` URL (named, password hidden, when the failed write was the database's).
        workdir: The ``--workdir`` (named when the failed write was under it).
    """
    url = storage if isinstance(storage, str) else None
    db = sqlite_path(url) if url else None
    storage_flag = f"--storage {redact_url(url)}" if url else "the study storage"
    fix_storage = ("free space on its disk (or move the database to a disk with room and pass that --storage), "
                   "then run the same command again: every restart stored so far is kept")
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            where = e.filename if isinstance(e.filename, str) else None
            reason = os.strerror(e.errno or 0)
            if where and workdir and _inside(where, workdir):
                return (f"cannot write to the workdir --workdir {workdir} ({reason}: {where}); free space on its "
                        "disk or pass a --workdir with room, then run the same command again: every restart "
                        "stored so far is kept")
            if where and db is not None and _inside(where, str(db.parent)):
                return f"cannot write to the study storage {storage_flag} ({reason}: {where}); {fix_storage}"
            return (f"cannot write {where or 'to disk'} ({reason}); free space on its disk, then run the same command "
                    "again: every restart stored so far is kept")
        name = getattr(e, "sqlite_errorname", None) if isinstance(e, sqlite3.Error) else None
        if name == _SQLITE_FULL or name in _SQLITE_WRITE_ERRORS:
            why = ("the disk is full" if name == _SQLITE_FULL
                   else "the disk is full, a file-size or quota limit was reached, or the disk failed")
            return (f"cannot write to the study storage {storage_flag} ({redact_text(str(e))[:120]}, {name}: "
                    f"{why}); {fix_storage}")
    return None
