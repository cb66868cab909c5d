"""An MLflow SQLite store is created whole or not at all, and one left half-built is rebuilt (issue 22, FS02).

MLflow creates a new SQLite store by running its ~100 schema migrations in place, and they are not one transaction:
on a full disk it stops half-way, and every later open tries to create the tables again and fails (``table datasets
already exists``), so tracking stayed off for every study after. autotune now builds a new store in a temporary
file beside it and links it into place only once MLflow has finished (``os.link`` refuses to replace a store
another process put there first); a failed build leaves nothing but the temporary file, which autotune removes.

A store found half-built - some of MLflow's tables but not all, or no schema version - is rebuilt the same way
when it holds no run: nothing anyone logged is in it. The old file is kept beside it as
``<name>.half-built-<time>`` (autotune does not delete what it cannot prove it created). A store with runs in it is
never touched; MLflow's own error then reaches the user as before.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

__all__ = ["ensure_sqlite_store", "half_built"]


def _expected_tables() -> set[str]:
    """The tables an MLflow store at this MLflow's schema has (the set MLflow's own check uses)."""
    from mlflow.store.db.base_sql_model import Base
    import mlflow.store.tracking.dbmodels.models  # noqa: F401 - registers the tables on Base

    return set(Base.metadata.tables)


def half_built(db: Path) -> bool:
    """``db`` has some of MLflow's tables but not all (or no schema version), and holds no run."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return False
    try:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables - {"alembic_version"}:
            return False  # empty: MLflow creates it from scratch (ensure_sqlite_store does that first)
        versioned = "alembic_version" in tables and con.execute("SELECT 1 FROM alembic_version").fetchone()
        if versioned and _expected_tables() <= tables:
            return False  # whole (possibly an older schema: MLflow says how to upgrade it)
        return "runs" not in tables or con.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None
    except sqlite3.Error:
        return False  # not a database MLflow made: the preflight check names it
    finally:
        con.close()


def _build(db: Path) -> None:
    """Build a complete store at ``db`` through a temporary file; nothing at ``db`` if the build fails."""
    from mlflow import MlflowClient

    tmp = db.with_name(f".{db.name}.autotune-building-{os.getpid()}")
    try:
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
        with contextlib.suppress(FileExistsError):  # another process built one first: use theirs
            os.link(tmp, db)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            leftover.unlink(missing_ok=True)


def ensure_sqlite_store(db: Path) -> str | None:
    """Make sure ``db`` is a whole MLflow store before MLflow opens it. Returns a note when it rebuilt one."""
    db.parent.mkdir(parents=True, exist_ok=True)
    if not db.exists():
        _build(db)
        return None
    if not half_built(db):
        return None
    kept = db.with_name(f"{db.name}.half-built-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(db, kept)
    journal = db.with_name(db.name + "-journal")
    if journal.exists():
        os.replace(journal, kept.with_name(kept.name + "-journal"))
    _build(db)
    return (f"the MLflow store {db} was half-built (its creation stopped, e.g. on a full disk): rebuilt; the old "
            f"file is {kept}")
