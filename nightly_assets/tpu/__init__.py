"""TPU VMs for the `tpu` pipeline (seed 003): created per run, the suite run over SSH, deleted always."""

from typing import TYPE_CHECKING

from nightly_assets.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from nightly_assets.tpu.models import TpuRunOutcome, TpuSuite, TpuTarget
    from nightly_assets.tpu.nodes import TpuApiError, TpuNotReadyError, TpuQuotaError
    from nightly_assets.tpu.resources import TpuVmResource, sweep_orphans
    from nightly_assets.tpu.session import TpuVm

# Each name from its module on first use: loading the catalog (tpu.models) must not import the
# SSH and Cloud TPU client libraries that a run needs.
__getattr__ = lazy_exports(
    __name__,
    {
        "TpuApiError": "nodes",
        "TpuNotReadyError": "nodes",
        "TpuQuotaError": "nodes",
        "TpuRunOutcome": "models",
        "TpuSuite": "models",
        "TpuTarget": "models",
        "TpuVm": "session",
        "TpuVmResource": "resources",
        "sweep_orphans": "resources",
    },
)


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
