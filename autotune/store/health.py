"""Whether a store can be used, before a command touches it: the Optuna storage (a bad URL, a missing driver, a
missing, corrupt, locked, read-only or foreign SQLite file) and any SQLite file autotune will write.

Every check raises :class:`StoreNotUsable` with one line naming the flag (or file) and the fix, so a study does not
fail after an hour for a store it could have refused at once. A full disk is not bad input: :mod:`.disk_full` says
so in its own line. Nothing is created here: a new SQLite file is only checked for a directory that takes files.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.core.redact import redact_uri
from autotune.core.urls import StorageUrl
from autotune.store.disk_full import raise_if_disk_full

__all__ = [
    "LOCK_WAIT_S",
    "SQLITE_SIDECARS",
    "StoreNotUsable",
    "check_sqlite_file",
    "check_sqlite_writable",
    "check_storage",
    "probe_dir",
]


class StoreNotUsable(ValueError):
    """A store that cannot be used as asked; the message is one line naming it and the fix."""


#: Files SQLite keeps next to a database: writing one corrupts or loses the database as surely as the file itself.
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def probe_dir(directory: Path) -> str | None:
    """Why files cannot be created in ``directory`` (made later, by the command, if missing), or ``None``.
    Root-proof: it writes a file and removes it. A missing directory is not made here: the nearest directory that
    exists is probed instead, so a command refused later (a bad flag, a bad space) leaves no directory behind
    (issue 44: nothing is created before the input that names it is accepted)."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".autotune-probe-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


#: How long a check waits for another process's lock on an SQLite store before saying it is locked.
LOCK_WAIT_S = 30.0


def _lock_holders(db: Path) -> list[str]:
    """``pid N (name)`` of each process of this user that has ``db`` (or its journal or WAL) open."""
    import psutil

    wanted = {os.path.realpath(db), *(os.path.realpath(f"{db}{suffix}") for suffix in SQLITE_SIDECARS)}
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if any(os.path.realpath(f.path) in wanted for f in proc.open_files()):
                found.append(f"pid {proc.pid} ({proc.info['name']})")
    return found


def _locked(db: Path, what: str) -> StoreNotUsable:
    holders = _lock_holders(db)
    who = (f"by {', '.join(holders[:3])}" if holders else "by another process (a running autotune tune or worker, "
           "or an open sqlite3 shell)")
    return StoreNotUsable(f"{what}: {db} is locked {who}, still after {LOCK_WAIT_S:g} s; the database is not "
                          "damaged: wait for that process to finish (or stop it), then run the same command again")


def check_sqlite_file(db: Path, what: str, write: bool) -> None:
    """An existing SQLite file is an intact database (SQLite's ``quick_check``) and, with ``write``, writable. A
    database another process keeps locked is said to be locked, naming the process where it can be seen: locked
    is not corrupt, and the advice for a damaged one (restore it from a copy) would overwrite a healthy store."""
    try:
        con = sqlite3.connect(f"file:{db}?mode={'rw' if write else 'ro'}", uri=True, timeout=LOCK_WAIT_S)
        try:
            ok = con.execute("PRAGMA quick_check").fetchone()
            if ok is None or ok[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {ok[0] if ok else 'no answer'}")
            if write:
                con.execute("BEGIN IMMEDIATE")  # takes the write lock: fails on a read-only file or file system
                con.rollback()
        finally:
            con.close()
    except sqlite3.Error as exc:
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc)):
            raise _locked(db, what) from None
        raise StoreNotUsable(f"{what}: {db} is not a usable SQLite database ({exc}); restore it from a copy, or "
                             "point the flag at a new file") from None


def check_sqlite_writable(db: Path, what: str) -> None:
    """An SQLite database file autotune will write: its directory takes files, the file is a writable database."""
    problem = probe_dir(db.parent)
    if problem is not None:
        raise StoreNotUsable(f"{what}: cannot create files in {db.parent} ({problem}); make it writable or "
                             "point the flag elsewhere")
    if db.exists():
        check_sqlite_file(db, what, write=True)


#: Tables only Optuna's storage has (any one of them: a store, perhaps being created by another command now).
_OPTUNA_TABLES = frozenset({"studies", "version_info", "alembic_version", "trials", "study_directions"})


def _check_foreign_sqlite(db: Path, what: str, write: bool) -> None:
    """An existing SQLite file without Optuna's tables is left as it is: a command that only reads never writes
    Optuna's schema into it (an empty file included), and ``tune`` does not add its tables to another program's
    database (tables of its own, none of Optuna's). Read through a read-only connection."""
    if not db.exists():
        return
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        try:
            tables = [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        finally:
            con.close()
    except sqlite3.Error:
        return  # check_sqlite_file has said what is wrong with the file
    if _OPTUNA_TABLES & set(tables):
        return  # Optuna's store (or one another command is creating now: its tables come one at a time)
    if not write:
        raise StoreNotUsable(f"{what}: no studies in {db} (it holds no Optuna tables; nothing was written to it): "
                             "run `autotune tune` first, or pass the --storage the study was run with")
    if tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreNotUsable(f"{what}: {db} is another program's SQLite database (tables {shown}; none of "
                             "Optuna's), which autotune will not add its tables to: pass a new file, e.g. "
                             "sqlite:///mlruns/optuna.db")


def check_storage(url: str | StorageUrl, write: bool, existing: bool = False) -> Any:
    """Open the Optuna storage at ``url`` once, so a bad URL or a broken store is one line, not a traceback.

    Nothing is created here: a new SQLite file ``tune`` will make is only checked for a directory that takes files
    (the file itself is made when the study starts, after every other input was accepted).

    Args:
        url: The ``--storage`` URL (``memory`` for tests and benchmarks), parsed or not yet.
        write: The command will write to it (``tune``): an SQLite file must also be writable.
        existing: The command works on a study that must already be there (``recheck``): a missing SQLite file is
            refused, as for a command that only reads, and never created.

    Returns:
        The opened storage (``None`` for a new SQLite file, which is not created here).
    """
    import optuna

    store = StorageUrl.of(url)
    flag = f"--storage {store.shown}"
    if store.memory:
        return optuna.storages.InMemoryStorage()
    db = store.sqlite_file
    if db is None and store.url.startswith("sqlite:"):
        raise StoreNotUsable(f"{flag}: an SQLite URL needs three slashes and a path, e.g. sqlite:///mlruns/optuna.db")
    if "://" not in store.url:
        raise StoreNotUsable(f"{flag}: not a database URL; use e.g. sqlite:///mlruns/optuna.db or "
                             "postgresql://user@host/db")
    if db is not None:
        if write and not (existing and not db.exists()):
            check_sqlite_writable(db, flag)
            if not db.exists():
                return None  # a new store: made by the study itself, once everything else is accepted
        elif not db.exists():
            raise StoreNotUsable(f"{flag}: no studies yet ({db} does not exist): run `make demo` or "
                                 "`autotune tune` first, or pass the --storage the study was run with")
        else:
            check_sqlite_file(db, flag, write=False)
        _check_foreign_sqlite(db, flag, write)
    from autotune.store._storage import check_optuna_schema

    check_optuna_schema(store)  # another Optuna's table schema: one line naming it, before Optuna touches the file
    try:
        from sqlalchemy.exc import ArgumentError, SQLAlchemyError

        storage = _open_rdb(store.url)
    except (ArgumentError, ValueError) as exc:
        raise StoreNotUsable(f"{flag}: not a database URL Optuna can open ({_first_line(exc)}); use e.g. "
                             "sqlite:///mlruns/optuna.db") from None
    except ImportError as exc:
        # Optuna re-raises the driver's ImportError with a sentence of its own: the module is the cause's name.
        driver = getattr(exc.__cause__, "name", None) or exc.name or _first_line(exc)
        raise StoreNotUsable(f"{flag}: its database driver {driver!r} is not installed; "
                             f"{_driver_fix(store.url)}") from None
    except SQLAlchemyError as exc:
        raise_if_disk_full(exc, storage=store.url)  # a full disk is not bad input: its own line (issue 22, FS01)
        raise StoreNotUsable(f"{flag}: cannot be used ({_first_line(exc)}); check the URL, the server "
                             "and permissions") from None
    return storage


def _driver_fix(url: str) -> str:
    """Install the missing driver, or name one that is installed: SQLAlchemy picks a default driver per database
    (``postgresql://`` means psycopg 3 with SQLAlchemy 2.1), and autotune ships psycopg2
    (``postgresql+psycopg2://``)."""
    import importlib.util

    scheme = url.split("://", 1)[0]
    if scheme == "postgresql" and importlib.util.find_spec("psycopg2") is not None:
        return "psycopg2 is installed here: name it in the URL, postgresql+psycopg2://USER@HOST:PORT/DB"
    return "install it into autotune's environment, or use sqlite:///..."


def _open_rdb(url: str) -> Any:
    """Optuna's storage at ``url``, read once; a lost race to create a new database's tables is tried again, as
    :func:`autotune.store.ledger.make_storage` does (two commands started at once are not a broken store)."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from autotune.store._storage import creation_race

    for attempt in range(3):
        try:
            storage = optuna.storages.RDBStorage(url, heartbeat_interval=None)
            optuna.get_all_study_summaries(storage)
            return storage
        except SQLAlchemyError as exc:
            if attempt == 2 or not creation_race(exc):
                raise
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    with contextlib.suppress(Exception):
        line = redact_uri(line)
    return line[:300]

