"""Storage and tracking URLs: the SQLite file behind a URL, and a URL safe to print."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.urls import StorageUrl, redact_url, sqlite_path

SQLITE_PATHS = [
    ("sqlite:///mlruns/optuna.db", Path("mlruns/optuna.db")),
    ("sqlite:////abs/dir/optuna.db?timeout=30", Path("/abs/dir/optuna.db")),
    ("sqlite+pysqlite:///a/b.db", Path("a/b.db")),
    ("sqlite://", None),
    ("sqlite:///:memory:", None),
    ("sqlite:/x.db", None),
    ("memory", None),
    ("postgresql://u:pw@host/optuna", None),
    ("http://127.0.0.1:5000", None),
]


@pytest.mark.parametrize("url, path", SQLITE_PATHS)
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


@pytest.mark.parametrize("url, path", SQLITE_PATHS)
def test_a_storage_url_parsed_once_holds_what_each_reader_would_have_parsed(url, path):
    store = StorageUrl.parse(url)
    assert (store.url, store.shown, store.sqlite_file) == (url, redact_url(url), path)
    assert store.memory == (url == "memory")
    assert StorageUrl.of(store) is store  # a parsed URL is carried as it is, not parsed again
    assert StorageUrl.of(url) == store


def test_a_storage_url_never_shows_its_password_when_printed():
    store = StorageUrl.parse("postgresql+psycopg2://bob:s3cret@db:5432/optuna")
    assert store.url == "postgresql+psycopg2://bob:s3cret@db:5432/optuna"  # what Optuna is given
    assert "s3cr" not in repr(store) and "s3cr" not in str(store) and "s3cr" not in f"{store}"
