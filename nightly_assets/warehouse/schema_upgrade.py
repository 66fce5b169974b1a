"""The schema upgrade at the store's start (``ensure_schema``): creates what ``tables.py`` has and
the database lacks (tables, then columns and indexes a newer version added), safe against another
process doing the same."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine, case, func, inspect, text, update
from sqlalchemy.exc import SQLAlchemyError

from nightly_assets.warehouse.tables import (
    CONFIG_KEY_LEN,
    RUN_ID_LEN,
    Base,
    BenchmarkTable,
    NightTable,
    SuiteTable,
    TestCaseTable,
)

_log = logging.getLogger(__name__)


# Columns a newer version added to an existing table: (table, column, its definition on both
# SQLite and MySQL/MariaDB). A NOT NULL column needs a default, which the rows already there get.
ADDED_COLUMNS = (
    (TestCaseTable.__tablename__, "test_key", "BIGINT"),
    (BenchmarkTable.__tablename__, "config_key", f"VARCHAR({CONFIG_KEY_LEN}) NOT NULL DEFAULT ''"),
    (SuiteTable.__tablename__, "run_id", f"VARCHAR({RUN_ID_LEN}) NOT NULL DEFAULT ''"),
    (NightTable.__tablename__, "detail", "TEXT"),
)


def ensure_schema(engine: Engine, url: str) -> None:
    """Create what is missing, idempotently and safe against another process doing the
    same: tables (with their indexes), then columns (``ADDED_COLUMNS``) and indexes that a
    newer version added to an existing table. `test_cases.test_key` is filled in for older
    rows before its indexes are created, so a start that dies half-way is completed by the
    next one.
    `url` (without its password) names the warehouse in the log."""
    for table in Base.metadata.sorted_tables:
        # One table at a time: two first runs on a new warehouse both find a table missing, and
        # the one that creates it second is told it exists (its indexes are created below).
        try:
            table.create(engine, checkfirst=True)
        except SQLAlchemyError as exc:
            if not _exists_error(exc):
                raise
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


def _ddl(engine: Engine, statement: str) -> None:
    with engine.connect() as connection:
        try:
            connection.execute(text(statement))
            connection.commit()
        except SQLAlchemyError as exc:  # another process ran it first
            if not _exists_error(exc):
                raise


def _exists_error(exc: SQLAlchemyError) -> bool:
    """MySQL's table exists (1050), duplicate column (1060) or key name (1061); SQLite's
    'duplicate column' or 'already exists'."""
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    if args and args[0] in (1050, 1060, 1061):
        return True
    message = str(getattr(exc, "orig", exc)).lower()
    return "already exists" in message or "duplicate column" in message
