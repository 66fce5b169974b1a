"""TPU VMs for the `tpu` pipeline (seed 003): created per run, the suite run over SSH, deleted always."""

from nightly_assets.tpu.models import TpuRunOutcome, TpuSuite, TpuTarget
from nightly_assets.tpu.nodes import TpuApiError, TpuNotReadyError, TpuQuotaError
from nightly_assets.tpu.resources import TpuVmResource, sweep_orphans
from nightly_assets.tpu.session import TpuVm

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
