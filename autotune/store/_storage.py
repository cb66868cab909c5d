"""Where studies live: the storage URL, opening it (heartbeats, SQLite's write lock), listing its studies.

Nothing here reads or writes a study's own record; that is :mod:`autotune.store.ledger`.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial

from autotune.core.redact import redact
from autotune.core.urls import StorageUrl
from autotune.store._keys import CLAIMS_SUFFIX

DEFAULT_STORE_DIR = "mlruns"
DEFAULT_STORAGE = f"sqlite:///{DEFAULT_STORE_DIR}/optuna.db"
#: Per-study working files (engine caches, logs) go under ``DEFAULT_WORKDIR/<study>`` unless ``--workdir`` says.
DEFAULT_WORKDIR = os.path.join(DEFAULT_STORE_DIR, "autotune")

# -- storage settings ------------------------------------------------------------------------------------
#: Seconds between a worker's heartbeats; a trial whose worker was silent for :data:`GRACE_FACTOR` times this
#: is failed and retried by another worker. An engine start takes 30 s to minutes: a minute or two of delay
#: before a dead worker's trial is taken over costs little.
DEFAULT_HEARTBEAT_S = 30
GRACE_FACTOR = 4
#: A stale trial is queued again at most this often: a configuration that kills its worker every time must
#: not keep the study busy forever.
MAX_RETRIES = 3
#: SQLite busy timeout for several workers on one file. Measured (docs/scaling.md): 8 processes, 200 trials,
#: 2,200 storage operations, no "database is locked" error even with SQLite's default 5 s; 30 s is headroom.
SQLITE_BUSY_TIMEOUT_S = 30

class LedgerError(Exception):
    """A study that cannot be opened (unknown name, a schema this autotune does not read): one line, the fix."""



def ensure_sqlite_dir(storage: str | StorageUrl) -> None:
    """Create the directory of a ``sqlite:///path`` URL, so the default store works on a fresh clone."""
    path = StorageUrl.of(storage).sqlite_file
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def _retry_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """Heartbeat-stale trials: a search trial is queued again with what it measured; a claim is just taken over."""
    if study.study_name.endswith(CLAIMS_SUFFIX):
        return
    RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES, inherit_intermediate_values=True)(study, trial)


def make_storage(url: str | StorageUrl | optuna.storages.BaseStorage,
                 heartbeat_s: int | None = DEFAULT_HEARTBEAT_S) -> optuna.storages.BaseStorage:
    """Optuna storage for ``url``: ``memory`` (one process, nothing persisted) or an SQLAlchemy URL.

    A relational storage gets Optuna's heartbeat (``heartbeat_s`` seconds, grace :data:`GRACE_FACTOR` times
    that) and a stale-trial callback that queues the trial again, so a worker that dies mid-trial leaves work
    another worker picks up, and a live worker's trial is never failed; on SQLite its transactions take the write
    lock as they begin (:func:`_serialize_sqlite`). ``heartbeat_s=None`` opens a storage for reading the record.
    A storage object is used as it is (threads sharing an in-memory study, in the scaling benchmark).

    Raises:
        LedgerError: the storage cannot be opened (a missing driver, a server that refuses); one line, no password.
    """
    if isinstance(url, optuna.storages.BaseStorage):
        return url
    store = StorageUrl.of(url)
    if store.memory:
        return optuna.storages.InMemoryStorage()
    check_optuna_schema(store)  # before Optuna opens it: its opening may already write to an old schema's tables
    ensure_sqlite_dir(store)
    kwargs: dict[str, Any] = {}
    if store.sqlite:
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    if heartbeat_s:
        kwargs.update(heartbeat_interval=int(heartbeat_s), grace_period=GRACE_FACTOR * int(heartbeat_s),
                      heartbeat_stale_trial_callback=_retry_stale)
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(store.url, **kwargs)
            if store.sqlite and heartbeat_s:
                _serialize_sqlite(storage)  # a worker's: it takes trials (a reader's may be a read-only file)
            _uninterrupted_transactions(storage)
            return storage
        except ImportError as exc:
            driver = "pip install 'autotune[postgres]'" if store.url.startswith("postgres") else "install its driver"
            raise LedgerError(f"storage {redact(store.url)}: the database driver is missing ({exc}): "
                              f"{driver}") from None
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's errors: first line only, never the URL's password
            if attempt < 2 and creation_race(exc):
                time.sleep(0.5 + attempt)
                continue
            first = redact((str(exc).strip().splitlines() or [""])[0])[:300]
            raise LedgerError(f"storage {redact(store.url)} cannot be opened: {type(exc).__name__}: {first}") from None
    raise AssertionError("unreachable")


def creation_race(exc: BaseException) -> bool:
    """``exc`` is the loser's error when processes that start at once on a new database race to create Optuna's
    tables (``tune`` and its workers, two ``tune`` commands, a ``tune`` and a ``report``): a second attempt finds
    the tables there. Every opener of a storage retries it (not a damaged store, not bad input)."""
    message = str(exc)
    return any(m in message for m in ("already exists", "UNIQUE constraint", "duplicate key"))


def _optuna_schemas() -> tuple[list[str], str]:
    """Every table schema (alembic revision) the installed Optuna knows, and the one it writes (its head)."""
    import optuna.storages._rdb as rdb  # Optuna's migrations: no public API names the revisions it knows
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", os.path.join(os.path.dirname(rdb.__file__), "alembic"))
    script = ScriptDirectory.from_config(config)
    return [r.revision for r in script.walk_revisions()], str(script.get_current_head())


def _stored_optuna_schema(store: StorageUrl) -> tuple[str, str | None] | None:
    """``(revision, optuna version)`` an existing storage's tables were written with; ``None``: no tables yet, or
    not readable here (then Optuna's own opening says why)."""
    import sqlalchemy

    db = store.sqlite_file
    if store.sqlite and (db is None or not db.is_file()):
        return None  # connecting would create the file; Optuna creates it with its current schema anyway
    try:
        engine = sqlalchemy.create_engine(store.url)
    except Exception:  # noqa: BLE001 - a bad URL or a missing driver: make_storage's own error says which
        return None
    try:
        with engine.connect() as con:
            tables = set(sqlalchemy.inspect(con).get_table_names())
            if "alembic_version" not in tables:
                return None
            row = con.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).fetchone()
            if row is None:
                return None
            made_by = None
            if "version_info" in tables:
                info = con.execute(sqlalchemy.text("SELECT library_version FROM version_info")).fetchone()
                made_by = None if info is None else str(info[0])
            return str(row[0]), made_by
    except Exception:  # noqa: BLE001 - a locked, damaged or unreachable store: the preflight and Optuna name it
        return None
    finally:
        engine.dispose()


def check_optuna_schema(url: str | StorageUrl) -> None:
    """An existing storage's tables are in the schema the installed Optuna writes, checked by reading only.

    Optuna refuses another schema itself, but after opening the storage (which creates missing tables and may
    stamp an old one) and with a traceback; here the refusal comes first, names the schema, the Optuna that wrote
    it and the fix, and nothing in the file has changed.

    Raises:
        LedgerError: the tables were written by a newer Optuna (upgrade Optuna) or an older one (``optuna storage
            upgrade``).
    """
    store = StorageUrl.of(url)
    stored = _stored_optuna_schema(store)
    if stored is None:
        return
    revision, made_by = stored
    known, head = _optuna_schemas()
    if revision == head:
        return
    by = f" by optuna {made_by}" if made_by else ""
    where = f"storage {redact(store.url)}: its tables were written{by} (table schema {revision})"
    if revision not in known:
        raise LedgerError(f"{where}, newer than the installed optuna {optuna.__version__} reads: upgrade optuna in "
                          "autotune's environment (pip install -U optuna) to open it; nothing in it was changed")
    raise LedgerError(f"{where}, older than the installed optuna {optuna.__version__} writes (schema {head}): back "
                      f"the file up, then run `optuna storage upgrade --storage {redact(store.url)}`; nothing in it "
                      "was changed")


def _uninterrupted_transactions(storage: optuna.storages.RDBStorage) -> None:
    """A termination signal (SIGTERM, SIGHUP) never lands inside one of ``storage``'s transactions.

    The signal's handler raises where the main thread is; inside a transaction that leaves it half done and its
    lock held until the connection is reset, and the interruption's own bookkeeping (the trial marked
    interrupted and queued again) then waited on that lock and failed ("database is locked", a traceback instead
    of a clean exit 143). So while the main thread holds a connection of this storage the signal waits, and it is
    delivered just after the connection is given back (:func:`autotune.engines.process.hold_interruptions`).
    """
    import sqlalchemy

    from autotune.engines.process import hold_interruptions, release_interruptions

    sqlalchemy.event.listen(storage.engine, "checkout", lambda *_: hold_interruptions())
    sqlalchemy.event.listen(storage.engine, "checkin", lambda *_: release_interruptions())


def _serialize_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """Make every SQLite transaction of ``storage`` take the database's write lock when it begins.

    Optuna makes its read-then-write steps atomic with ``SELECT ... FOR UPDATE`` (taking a queued trial: read it
    WAITING, set it RUNNING; failing a stale trial: read it RUNNING, set it FAIL). SQLite ignores ``FOR UPDATE``,
    and Python's sqlite3 module opens a transaction only at the first write, so two workers can both read the
    trial WAITING and both run it (optuna/optuna#4002). Measured: four processes emptying a queue of 400 trials
    on one SQLite file took 22 of them twice; the same configuration then ran on two workers, with two MLflow
    runs and starts over the budget. ``BEGIN IMMEDIATE`` (SQLAlchemy's documented recipe for pysqlite) puts the
    read and the write in one transaction that holds the write lock, so SQLite runs them one worker at a time;
    a worker that finds the lock taken waits (:data:`SQLITE_BUSY_TIMEOUT_S`) instead of failing.
    """
    import sqlalchemy

    engine = storage.engine

    def connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # no implicit BEGIN: SQLAlchemy's begin event issues it

    def begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    sqlalchemy.event.listen(engine, "connect", connect)
    sqlalchemy.event.listen(engine, "begin", begin)
    engine.dispose()  # the connections opened while Optuna set the database up predate the hooks


def existing_storage(url: str | StorageUrl | optuna.storages.BaseStorage) -> optuna.storages.BaseStorage:
    """The storage at ``url`` for reading studies it must already hold (a report, a recheck, a worker, a warm
    start's source): a missing SQLite file is refused and not created, so a typo in the path leaves nothing behind.

    Raises:
        LedgerError: the SQLite file does not exist (nothing was created), or as :func:`make_storage`.
    """
    if isinstance(url, optuna.storages.BaseStorage):
        return url
    store = StorageUrl.of(url)
    path = store.sqlite_file
    if path is not None and not path.exists():
        raise LedgerError(f"no studies in {redact(store.url)}: {path} does not exist (nothing was created there); "
                          "check the path, or pass the --storage the study was run with")
    return make_storage(store, heartbeat_s=None)


def study_names(storage: str | StorageUrl | optuna.storages.BaseStorage) -> list[str]:
    """Names of the studies in ``storage``, oldest first (a study's companion claims study is not one)."""
    summaries = optuna.get_all_study_summaries(existing_storage(storage))
    summaries.sort(key=lambda s: s.datetime_start.timestamp() if s.datetime_start else 0.0)
    return [s.study_name for s in summaries if not s.study_name.endswith(CLAIMS_SUFFIX)]


def latest_study_name(storage: str | StorageUrl) -> str:
    """The most recently started study in ``storage``.

    Raises:
        LedgerError: the store holds no study.
    """
    names = study_names(storage)
    if not names:
        raise LedgerError(f"no studies in {redact(StorageUrl.of(storage).url)}: run `make demo` or `autotune tune` "
                          "first")
    return names[-1]
