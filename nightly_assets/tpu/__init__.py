"""TPU VMs for the `tpu` pipeline (seed 003): created per run, the suite run over SSH, deleted always."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nightly_assets.tpu.models import TpuRunOutcome, TpuSuite, TpuTarget
    from nightly_assets.tpu.nodes import TpuApiError, TpuNotReadyError, TpuQuotaError
    from nightly_assets.tpu.resources import TpuVmResource, sweep_orphans
    from nightly_assets.tpu.session import TpuVm

# Each name from its module on first use: loading the catalog (tpu.models) must not import the
# SSH and Cloud TPU client libraries that a run needs.
_HOMES = {
    "TpuApiError": "nodes",
    "TpuNotReadyError": "nodes",
    "TpuQuotaError": "nodes",
    "TpuRunOutcome": "models",
    "TpuSuite": "models",
    "TpuTarget": "models",
    "TpuVm": "session",
    "TpuVmResource": "resources",
    "sweep_orphans": "resources",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "TpuApiError",
    "TpuNotReadyError",
    "TpuQuotaError",
    "TpuRunOutcome",
    "TpuSuite",
    "TpuTarget",
    "TpuVm",
    "TpuVmResource",
    "sweep_orphans",
]
