"""Dagster resource that hands assets one shared ``Warehouse`` per resource instance."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field, PrivateAttr

from nightly_assets.settings import Seconds
from nightly_assets.warehouse.defaults import RETRY_S

if TYPE_CHECKING:  # the store (SQLAlchemy) on first use: loading the code location does not need it
    from nightly_assets.warehouse.store import Warehouse

URL_ENV = "NIGHTLY_WAREHOUSE_URL"


def default_warehouse_url(home: Path) -> str:
    """``$NIGHTLY_WAREHOUSE_URL`` if set, else a SQLite file in ``home``."""
    return os.environ.get(URL_ENV) or f"sqlite:///{home}/warehouse.sqlite"


class WarehouseResource(dg.ConfigurableResource):
    """The results warehouse. ``url`` is a SQLAlchemy URL, e.g.
    ``mysql+pymysql://user:pw@host:3306/db?charset=utf8mb4`` or ``sqlite:////path/warehouse.sqlite``.
    Prefer ``dg.EnvVar("NIGHTLY_WAREHOUSE_URL")`` when the URL holds a password, so that
    Dagster does not show it with the resource's configuration."""

    url: str = Field(repr=False, description="SQLAlchemy database URL of the warehouse.")
    retry_s: Seconds = Field(
        default=f"{RETRY_S:g}", description="How long a read or write retries a lost connection or a restart."
    )

    _store: Warehouse | None = PrivateAttr(default=None)

    def store(self) -> Warehouse:
        """The Warehouse of this resource instance, created (and its schema ensured) on first use."""
        if self._store is None:
            from nightly_assets.warehouse.store import Warehouse

            self._store = Warehouse(self.url, retry_s=float(self.retry_s))
        return self._store

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._store is not None:
            self._store.dispose()

    def __repr__(self) -> str:
        from nightly_assets.warehouse.connection import safe_url

        return f"WarehouseResource(url={safe_url(self.url)!r})"
