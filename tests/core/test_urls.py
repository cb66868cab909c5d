"""Storage and tracking URLs: the SQLite file behind a URL, and a URL safe to print."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.urls import redact_url, sqlite_path


@pytest.mark.parametrize("url, path", [
    ("sqlite:///mlruns/optuna.db", Path("mlruns/optuna.db")),
    ("sqlite:////abs/dir/optuna.db?timeout=30", Path("/abs/dir/optuna.db")),
    ("sqlite+pysqlite:///a/b.db", Path("a/b.db")),
    ("sqlite://", None),
    ("sqlite:///:memory:", None),
    ("sqlite:/x.db", None),
    ("memory", None),
    ("postgresql://u:pw@host/optuna", None),
    ("http://127.0.0.1:5000", None),
])
def test_sqlite_path(url, path):
    assert sqlite_path(url) == path


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg2://bob:s3cret@db:5432/optuna", "postgresql+psycopg2://bob:***@db:5432/optuna"),
    ("http://user:s3cret@127.0.0.1:5077", "http://user:***@127.0.0.1:5077"),
    ("https://user:s3cr%40t@host/", "https://user:***@host/"),
    # Nothing to hide: the text stays exactly as given (no re-encoding, no reordered query).
    ("sqlite:///:memory:", "sqlite:///:memory:"),
    ("postgresql://u@h/db?b=1&a=2", "postgresql://u@h/db?b=1&a=2"),
    # Not a URL SQLAlchemy parses: a password-shaped part still goes.
    ("not a url: redis://u:s3cret@h", "not a url: redis://u:***@h"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown
    assert "s3cr" not in redact_url(url)
