"""How the store reaches its database: the engine, opened with the schema upgraded at start, and
the transactions every read and write of ``reads.py`` and ``writes.py`` runs in, retried through
transient errors (``connection.is_transient``). ``WarehouseError`` is what a caller sees when the
retries run out, one line naming the URL without its password."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, delete, insert
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from nightly_assets.results import NightKey
from nightly_assets.warehouse import connection
from nightly_assets.warehouse.defaults import RETRY_S
from nightly_assets.warehouse.schema_upgrade import ensure_schema

T = TypeVar("T")
_log = logging.getLogger(__name__)

_BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0)  # then 5 s between attempts


class WarehouseError(RuntimeError):
    """The warehouse could not be reached or written; names the URL without its password."""


def utc_now() -> dt.datetime:
    """Now in UTC without tzinfo, as the tables store times (MySQL DATETIME has no zone)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class DatabaseAccess:
    """The warehouse's database, opened (its schema upgraded) at start, and the transactions the
    store's reads and writes run in. Every read and write retries transient errors (a lost
    connection, a restarting server, a deadlock) with backoff for up to `retry_s`, so a database
    restart during a night delays its stages instead of failing them."""

    def __init__(self, url: str, *, retry_s: float = RETRY_S) -> None:
        self._url = connection.safe_url(url)
        self._secret = connection.password(url)
        self._retry_s = retry_s
        try:
            self._engine = connection.open_engine(url)
        except (SQLAlchemyError, ImportError, OSError, ValueError) as exc:
            raise self._error("cannot open", exc) from exc
        self._retrying("cannot open", lambda: ensure_schema(self._engine, self._url))
        self._sessions = sessionmaker(self._engine)

    def dispose(self) -> None:
        self._engine.dispose()

    # -- plumbing -------------------------------------------------------------------------

    def _replace(
        self,
        table: type[Any],
        where: Sequence[ColumnElement[bool]],
        rows: list[dict[str, Any]],
    ) -> None:
        def write(session: Session) -> None:
            session.execute(delete(table).where(*where))
            if rows:
                session.execute(insert(table), rows)

        self._write(write)

    def _write(self, fn: Callable[[Session], None]) -> None:
        """Run ``fn`` in one transaction. Every write replaces rows, so a retry is safe."""

        def transaction() -> None:
            with self._sessions.begin() as session:
                fn(session)

        self._retrying("cannot write to", transaction)

    def _changes(self, statement: Any) -> int:
        """Rows an insert, update or delete changed; 0 for an insert that met a unique key."""
        changed = 0

        def write(session: Session) -> None:
            nonlocal changed
            changed = int(getattr(session.execute(statement), "rowcount", 0) or 0)

        try:
            self._write(write)
        except WarehouseError as exc:
            if isinstance(exc.__cause__, IntegrityError):
                return 0
            raise
        return changed

    def _read(self, fn: Callable[[Session], T]) -> T:
        def read() -> T:
            with self._sessions() as session:
                return fn(session)

        return self._retrying("cannot read from", read)

    def _retrying(self, what: str, fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._retry_s
        for attempt in itertools.count():
            try:
                return fn()
            except SQLAlchemyError as exc:
                pause = _BACKOFF_S[attempt] if attempt < len(_BACKOFF_S) else 5.0
                if not connection.is_transient(exc) or time.monotonic() + pause > deadline:
                    raise self._error(what, exc) from exc
                _log.warning("warehouse %s: %s; retrying in %.2g s", self._url, self._cause(exc), pause)
                time.sleep(pause)
        raise AssertionError("unreachable")

    def _error(self, what: str, exc: BaseException) -> WarehouseError:
        return WarehouseError(f"{what} warehouse {self._url}: {self._cause(exc)}")

    def _cause(self, exc: BaseException) -> str:
        """One line: the driver's own error, without SQLAlchemy's statement dump and help link,
        and without the URL's password should the driver repeat it."""
        orig = getattr(exc, "orig", None) or exc
        cause = f"{type(orig).__name__}: {' '.join(str(orig).split('(Background on this error')[0].split())}"
        return cause.replace(self._secret, "***") if self._secret else cause


def key_columns(key: NightKey) -> dict[str, Any]:
    """The (pipeline, night, target) columns of a row of the key."""
    return {"pipeline": key.pipeline, "night": key.night, "target": key.target}
