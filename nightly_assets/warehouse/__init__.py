"""The nightly results warehouse (SQLite or MySQL/MariaDB through SQLAlchemy)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nightly_assets.warehouse.history import PassRate, TestRun
    from nightly_assets.warehouse.resources import WarehouseResource, default_warehouse_url
    from nightly_assets.warehouse.rows import MachineCost, NightOverview, NightRow, StageRow
    from nightly_assets.warehouse.store import Warehouse, WarehouseError

# Each name from its module on first use: SQLAlchemy (the store) costs a code location's load
# time, and `nightly status` reads the store without loading dagster (the resource).
_HOMES = {
    "MachineCost": "rows",
    "NightOverview": "rows",
    "NightRow": "rows",
    "PassRate": "history",
    "StageRow": "rows",
    "TestRun": "history",
    "Warehouse": "store",
    "WarehouseError": "store",
    "WarehouseResource": "resources",
    "default_warehouse_url": "resources",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


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
