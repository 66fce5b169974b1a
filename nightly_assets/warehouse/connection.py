"""Opening the warehouse's database: the engine and its per-backend options (SQLite's lock wait,
WAL and SQL ``node_key()``; MySQL/MariaDB's READ COMMITTED), the URL without its password, and
which errors a retry can outlive. The schema upgrade at start is ``schema_upgrade.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, SQLAlchemyError

from nightly_assets.warehouse.tables import node_key

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


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # node_key() in SQL, for filling in the rows of an older warehouse.
    dbapi_connection.create_function("nightly_test_key", 1, node_key, deterministic=True)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
    finally:
        cursor.close()
