"""Storage and tracking URLs, read by SQLAlchemy's own parser (the one Optuna and MLflow open them with).

``sqlite:///mlruns/optuna.db`` (a path relative to the working directory), ``sqlite:////abs/optuna.db``,
``postgresql+psycopg2://user:pw@host/db``, ``http://user:pw@host:5000``: :func:`sqlite_path` finds the database
file of an SQLite URL (to create its directory or check it before a study starts), :func:`redact_url` hides the
password of any of them before it is printed or stored.

A storage URL a command carries is parsed once, at the command line, into a :class:`StorageUrl`; whatever checks,
opens or protects the store reads its fields rather than parsing the text again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.redact import redact_uri

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["StorageUrl", "sqlite_path", "redact_url"]


def _parse(url: str) -> URL | None:
    # Imported here: sqlalchemy is heavy, and `autotune --help` should not pay for it.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError, TypeError):
        return None


def _sqlite_file(parsed: URL | None) -> Path | None:
    if parsed is None or parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    return None if not database or database == ":memory:" else Path(database)


def _shown(url: str, parsed: URL | None) -> str:
    if parsed is None:
        return redact_uri(url)
    if parsed.password is None:
        return url  # rendering would re-encode it (``:memory:``) or reorder its query for nothing
    return parsed.render_as_string(hide_password=True)


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (``sqlite:///...``, any driver), else ``None``.

    ``None`` too for an in-memory database (``sqlite://``, ``sqlite:///:memory:``) and for anything SQLAlchemy
    cannot parse (``memory``, ``sqlite:/x``).
    """
    return _sqlite_file(_parse(url))


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (SQLAlchemy's rendering); unchanged when it has none.

    Text SQLAlchemy cannot parse still loses anything shaped like ``scheme://user:password@``.
    """
    return _shown(url, _parse(url))


@dataclasses.dataclass(frozen=True)
class StorageUrl:
    """An Optuna storage URL (``--storage``), parsed once.

    Attributes:
        url: The URL as given: what Optuna opens, never printed (it may hold a password).
        shown: The URL as a line may show it (:func:`redact_url`).
        sqlite_file: The database file of an SQLite URL (:func:`sqlite_path`), else ``None``.
    """

    url: str = dataclasses.field(repr=False)  # never in a traceback or a log line: it may hold a password
    shown: str
    sqlite_file: Path | None

    @classmethod
    def parse(cls, url: str) -> StorageUrl:
        parsed = _parse(url)
        return cls(url=url, shown=_shown(url, parsed), sqlite_file=_sqlite_file(parsed))

    @classmethod
    def of(cls, url: str | StorageUrl) -> StorageUrl:
        """``url`` as a :class:`StorageUrl`: parsed if it is still text, as it is if it was parsed already."""
        return url if isinstance(url, StorageUrl) else cls.parse(url)

    @property
    def memory(self) -> bool:
        """``memory``: Optuna's in-memory storage, for tests and benchmarks (one process, nothing kept)."""
        return self.url == "memory"

    @property
    def sqlite(self) -> bool:
        """The URL names SQLite (a file, in memory, or malformed): it takes SQLite's busy timeout and write lock."""
        return self.url.startswith("sqlite")

    def __str__(self) -> str:
        return self.shown  # a URL put into a line by mistake never shows its password
