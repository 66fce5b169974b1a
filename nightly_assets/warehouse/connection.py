"""Opening the warehouse's database: the engine and its per-backend options (SQLite's lock wait,
WAL and SQL ``node_key()``; MySQL/MariaDB's READ COMMITTED), the URL without its password, which
errors a retry can outlive, and the schema upgrade at start (``ensure_schema``: creates what
``tables.py`` has and the database lacks, safe against another process doing the same)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, case, create_engine, event, func, inspect, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, SQLAlchemyError

from nightly_assets.warehouse.tables import CONFIG_KEY_LEN, Base, BenchmarkTable, TestCaseTable, node_key

_log = logging.getLogger(__name__)

# MySQL/MariaDB errors that a retry can outlive: lock wait timeout, deadlock, server shutting
# down, can't connect, server gone away, lost connection, connection killed, disconnected.
_TRANSIENT_MYSQL_CODES = frozenset({1205, 1213, 1053, 2003, 2006, 2013, 2055, 1927, 4031})


def safe_url(url: str) -> str:
    """The URL with its password replaced by ``***``, also when SQLAlchemy cannot parse it."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def password(url: str) -> str | None:
    """The URL's password (None if it has none), also when SQLAlchemy cannot parse it."""
    try:
        return make_url(url).password
    except (ArgumentError, ValueError):
        match = re.search(r"://[^:/@]*:([^@]*)@", url)
        return match.group(1) if match else None


def open_engine(url: str) -> Engine:
    """The engine of `url` with its backend's options; connects to nothing yet."""
    engine = create_engine(url, pool_pre_ping=True, **_engine_options(url))
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)
    return engine


def is_transient(exc: SQLAlchemyError) -> bool:
    """Whether a retry can outlive the error: a lost connection, a restarting server, a deadlock,
    a lock wait (MySQL/MariaDB) or a locked database file (SQLite)."""
    if isinstance(exc, DisconnectionError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    if args and args[0] in _TRANSIENT_MYSQL_CODES:
        return True
    return "database is locked" in str(exc.orig)  # SQLite: another writer past the busy timeout


# Columns a newer version added to an existing table: (table, column, its definition on both
# SQLite and MySQL/MariaDB). A NOT NULL column needs a default, which the rows already there get.
ADDED_COLUMNS = (
    (TestCaseTable.__tablename__, "test_key", "BIGINT"),
    (BenchmarkTable.__tablename__, "config_key", f"VARCHAR({CONFIG_KEY_LEN}) NOT NULL DEFAULT ''"),
)


def ensure_schema(engine: Engine, url: str) -> None:
    """Create what is missing, idempotently and safe against another process doing the
    same: tables (with their indexes), then columns (``ADDED_COLUMNS``) and indexes that a
    newer version added to an existing table. `test_cases.test_key` is filled in for older
    rows before its indexes are created, so a start that dies half-way is completed by the
    next one.
    `url` (without its password) names the warehouse in the log."""
    Base.metadata.create_all(engine)
    for table_name, column, definition in ADDED_COLUMNS:
        with engine.connect() as connection:
            have = {c["name"] for c in inspect(connection).get_columns(table_name)}
        if column not in have:
            _log.warning("warehouse %s: adding column %s.%s", url, table_name, column)
            _ddl(engine, f"ALTER TABLE {table_name} ADD COLUMN {column} {definition}")
    for table in Base.metadata.sorted_tables:
        with engine.connect() as connection:
            indexes = {i["name"] for i in inspect(connection).get_indexes(table.name)}
        missing = [index for index in table.indexes if index.name not in indexes]
        if missing and table.name == TestCaseTable.__tablename__:
            _fill_test_keys(engine)
        for index in missing:
            _log.warning("warehouse %s: creating index %s", url, index.name)
            with engine.connect() as connection:
                try:
                    index.create(connection)
                    connection.commit()
                except SQLAlchemyError as exc:  # another process created it first
                    if not _exists_error(exc):
                        raise


def _fill_test_keys(engine: Engine) -> None:
    """Compute `test_key` for rows written before the column existed (one UPDATE)."""
    node_id = case(
        (TestCaseTable.classname == "", TestCaseTable.name),
        else_=TestCaseTable.classname + "::" + TestCaseTable.name,
    )
    if engine.dialect.name == "sqlite":
        value: Any = func.nightly_test_key(node_id)
    else:
        value = func.conv(func.left(func.md5(node_id), 15), 16, 10)
    with engine.begin() as connection:
        connection.execute(
            update(TestCaseTable).where(TestCaseTable.test_key.is_(None)).values(test_key=value)
        )


def _engine_options(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        # Several run workers may write one file: wait for the lock instead of failing at once.
        return {"connect_args": {"timeout": 60}}
    if backend in ("mysql", "mariadb"):
        # No gap locks: concurrent delete+insert of different keys cannot deadlock each other.
        return {"isolation_level": "READ COMMITTED", "pool_recycle": 3600}
    return {}


def _ddl(engine: Engine, statement: str) -> None:
    with engine.connect() as connection:
        try:
            connection.execute(text(statement))
            connection.commit()
        except SQLAlchemyError as exc:  # another process ran it first
            if not _exists_error(exc):
                raise


def _exists_error(exc: SQLAlchemyError) -> bool:
    """MySQL's duplicate column (1060) or key name (1061), SQLite's 'duplicate column' or
    'already exists'."""
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    if args and args[0] in (1060, 1061):
        return True
    message = str(getattr(exc, "orig", exc)).lower()
    return "already exists" in message or "duplicate column" in message


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # node_key() in SQL, for filling in the rows of an older warehouse.
    dbapi_connection.create_function("nightly_test_key", 1, node_key, deterministic=True)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
    finally:
        cursor.close()
