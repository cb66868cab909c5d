"""Pytest plugin: the PostgreSQL server and MLflow tracking server that ``.ci/with-services.sh`` starts.

``.ci/run`` runs the suite under ``.ci/with-services.sh``, which exports :data:`PG_ENV` and :data:`MLFLOW_ENV`.
Locally, a test that needs a service it cannot find skips and says how to get it
(``PYTHON=.venv/bin/python bash .ci/with-services.sh .venv/bin/python -m pytest -m services``); under
``CI=true`` the same test fails instead, so CI can never pass by skipping the multi-worker tests.

Fixtures:

* ``postgres_url``: a SQLAlchemy URL to a database of its own, created for the test and dropped after it;
* ``mlflow_server_uri``: the tracking server's ``http://127.0.0.1:PORT``, shared by the session (tests tell
  their runs apart by their study names, which are unique per test).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

__all__ = ["MLFLOW_ENV", "PG_ENV", "require_service"]

PG_ENV = "AUTOTUNE_TEST_PG_URL"
MLFLOW_ENV = "AUTOTUNE_TEST_MLFLOW_URI"
HOW = "run the tests under .ci/with-services.sh, which starts PostgreSQL and an MLflow server on 127.0.0.1"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_service(env: str, what: str) -> str:
    """The value of ``env``; without it, skip the test (locally) or fail it (``CI=true``) naming the fix."""
    value = os.environ.get(env, "").strip()
    if value:
        return value
    why = f"{what} is not available: {env} is not set; {HOW}"
    if _in_ci():
        pytest.fail(f"CI=true but {why}", pytrace=False)
    pytest.skip(why)


def _unreachable(what: str, env: str, exc: BaseException) -> None:
    # A service that was announced but does not answer is a broken setup, locally too: never a skip.
    first = (str(exc).strip().splitlines() or [""])[0]
    pytest.fail(f"{what} from {env} does not answer: {type(exc).__name__}: {first[:200]}", pytrace=False)


@pytest.fixture(scope="session")
def _postgres_admin_url() -> str:
    url = require_service(PG_ENV, "PostgreSQL")
    sqlalchemy = pytest.importorskip("sqlalchemy")
    try:
        engine = sqlalchemy.create_engine(url)
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - a driver missing or a server down: one line, not a traceback
        _unreachable("PostgreSQL", PG_ENV, exc)
    return url


@pytest.fixture
def postgres_url(_postgres_admin_url: str) -> Iterator[str]:
    """A database of this test's own on the shared server; dropped afterwards, with whatever still uses it."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    admin = make_url(_postgres_admin_url)
    name = f"autotune_test_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


@pytest.fixture(scope="session")
def mlflow_server_uri() -> str:
    """The MLflow tracking server's URI (``http://127.0.0.1:PORT``)."""
    uri = require_service(MLFLOW_ENV, "the MLflow tracking server").rstrip("/")
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=10) as resp:
            if resp.status != 200:
                raise urllib.error.URLError(f"/health answered {resp.status}")
    except (urllib.error.URLError, OSError) as exc:
        _unreachable("the MLflow tracking server", MLFLOW_ENV, exc)
    return uri
