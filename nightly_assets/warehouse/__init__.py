"""The nightly results warehouse (SQLite or MySQL/MariaDB through SQLAlchemy)."""

from typing import TYPE_CHECKING, Any

from nightly_assets.warehouse.history import PassRate, TestRun
from nightly_assets.warehouse.rows import MachineCost, NightOverview, NightRow, StageRow
from nightly_assets.warehouse.store import Warehouse, WarehouseError

if TYPE_CHECKING:
    from nightly_assets.warehouse.resources import WarehouseResource, default_warehouse_url


def __getattr__(name: str) -> Any:
    """The Dagster resource on first use: `nightly status` reads the store without loading dagster."""
    if name in ("WarehouseResource", "default_warehouse_url"):
        from nightly_assets.warehouse import resources

        return getattr(resources, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MachineCost",
    "NightOverview",
    "NightRow",
    "PassRate",
    "StageRow",
    "TestRun",
    "Warehouse",
    "WarehouseError",
    "WarehouseResource",
    "default_warehouse_url",
]
