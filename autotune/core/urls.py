"""Storage and tracking URLs, read by SQLAlchemy's own parser (the one Optuna and MLflow open them with).

``sqlite:///mlruns/optuna.db`` (a path relative to the working directory), ``sqlite:////abs/optuna.db``,
``postgresql+psycopg2://user:pw@host/db``, ``http://user:pw@host:5000``: :func:`sqlite_path` finds the database
file of an SQLite URL (to create its directory or check it before a study starts), :func:`redact_url` hides the
password of any of them before it is printed or stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.redact import redact_uri

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["sqlite_path", "redact_url"]


def _parse(url: str) -> URL | None:
    # Imported here: sqlalchemy is heavy, and `autotune --help` should not pay for it.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return None


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (``sqlite:///...``, any driver), else ``None``.

    ``None`` too for an in-memory database (``sqlite://``, ``sqlite:///:memory:``) and for anything SQLAlchemy
    cannot parse (``memory``, ``sqlite:/x``).
    """
    parsed = _parse(url)
    if parsed is None or parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    return None if not database or database == ":memory:" else Path(database)


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (SQLAlchemy's rendering); unchanged when it has none.

    Text SQLAlchemy cannot parse still loses anything shaped like ``scheme://user:password@``.
    """
    parsed = _parse(url)
    if parsed is None:
        return redact_uri(url)
    if parsed.password is None:
        return url  # rendering would re-encode it (``:memory:``) or reorder its query for nothing
    return parsed.render_as_string(hide_password=True)
