"""The nightly results warehouse (SQLite or MySQL/MariaDB through SQLAlchemy)."""

from typing import TYPE_CHECKING

from nightly_assets.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from nightly_assets.warehouse.access import WarehouseError
    from nightly_assets.warehouse.history import PassRate, TestRun
    from nightly_assets.warehouse.resources import WarehouseResource, default_warehouse_url
    from nightly_assets.warehouse.rows import MachineCost, NightOverview, NightRow, StageRow
    from nightly_assets.warehouse.store import Warehouse

# Each name from its module on first use: SQLAlchemy (the store) costs a code location's load
# time, and `nightly status` reads the store without loading dagster (the resource).
__getattr__ = lazy_exports(
    __name__,
    {
        "MachineCost": "rows",
        "NightOverview": "rows",
        "NightRow": "rows",
        "PassRate": "history",
        "StageRow": "rows",
        "TestRun": "history",
        "Warehouse": "store",
        "WarehouseError": "access",
        "WarehouseResource": "resources",
        "default_warehouse_url": "resources",
    },
)


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
