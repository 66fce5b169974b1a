"""The TPU VM resource: a fresh TPU VM per run, the suite over SSH, the VM deleted always, and a
sweeper for VMs whose run is gone.

Credentials: google.auth's default credentials (a service account, workload identity, or
`gcloud auth application-default login`); nothing secret is held in config. Tests point
`api_endpoint` at a fake TPU API with `credentials: anonymous`.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import dagster as dg
from pydantic import Field

from nightly_assets.settings import FromEnv, PositiveSeconds, Seconds, one_of
from nightly_assets.tpu.models import TpuRunOutcome, TpuSuite, TpuTarget, TpuVmSettings
from nightly_assets.tpu.nodes import RUN_LABEL, TpuApiError, TpuNodes, TpuNotReadyError, label_value

if TYPE_CHECKING:  # imported by `client` and `vm`: a code location without TPU runs never loads the SDKs
    from google.cloud import tpu_v2

    from nightly_assets.tpu.session import TpuVm

_log = logging.getLogger(__name__)


class TpuVmResource(dg.ConfigurableResource):
    """Creates TPU VMs in `project` for the runs of the `tpu` pipeline and deletes them."""

    project: str = Field(default="", description="the GCP project the TPU VMs are created in ('': none)")
    api_endpoint: str | None = Field(default=None, description="TPU API endpoint; None: tpu.googleapis.com")
    transport: Literal["rest", "grpc"] = "rest"
    credentials: Annotated[str, one_of("default", "anonymous"), FromEnv] = Field(
        default="default", description="default: google.auth default credentials; anonymous: fakes in tests"
    )
    ssh_user: str = Field(default="nightly", description="the user the per-run SSH key is installed for")
    ssh_port: Annotated[int, FromEnv] = Field(default=22, ge=1, le=65535)
    use_internal_ip: bool = Field(default=False, description="reach the VM on its internal IP (same VPC)")
    use_queued_resource: Annotated[bool, FromEnv] = Field(
        default=False, description="ask through the QueuedResources API"
    )
    check_host_keys: bool = Field(default=True, description="pin the host key the node publishes")
    ready_timeout_s: PositiveSeconds = Field(default="900", description="create requested -> READY")
    poll_interval_s: PositiveSeconds = Field(default="10", description="between node state polls")
    delete_timeout_s: PositiveSeconds = Field(default="600", description="delete asked -> node gone")
    create_retry_s: Seconds = Field(
        default="300", description="how long a create answered 429 RESOURCE_EXHAUSTED is asked again"
    )
    api_timeout_s: float = Field(default=60.0, gt=0, description="per TPU API call")
    ssh_connect_timeout_s: PositiveSeconds = Field(default="300", description="READY -> SSH accepts the key")
    ssh_keepalive_s: int = Field(default=15, ge=0)
    remote_root: str = Field(default="", description="parent of the per-node work dir; '': the user's home")
    node_prefix: str = Field(default="nightly", description="node IDs are <prefix>-<run id>-<random>")

    def client(self) -> tpu_v2.TpuClient:
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import tpu_v2

        options = ClientOptions(api_endpoint=self.api_endpoint) if self.api_endpoint else None
        credentials = AnonymousCredentials() if self.credentials == "anonymous" else None
        return tpu_v2.TpuClient(transport=self.transport, credentials=credentials, client_options=options)

    def nodes(self) -> TpuNodes:
        if not self.project:
            raise TpuApiError(
                "TPU VMs need a GCP project: set NIGHTLY_TPU_PROJECT (or the resource's project)"
            )
        return TpuNodes(self.client(), self.project, call_timeout_s=self.api_timeout_s)

    def settings(self) -> TpuVmSettings:
        return TpuVmSettings(
            ssh_user=self.ssh_user,
            ssh_port=self.ssh_port,
            ready_timeout_s=float(self.ready_timeout_s),
            poll_interval_s=float(self.poll_interval_s),
            delete_timeout_s=float(self.delete_timeout_s),
            ssh_connect_timeout_s=float(self.ssh_connect_timeout_s),
            create_retry_s=float(self.create_retry_s),
            ssh_keepalive_s=self.ssh_keepalive_s,
            use_internal_ip=self.use_internal_ip,
            use_queued_resource=self.use_queued_resource,
            check_host_keys=self.check_host_keys,
            remote_root=self.remote_root,
            node_prefix=self.node_prefix,
        )

    def vm(
        self,
        target: TpuTarget,
        *,
        run_id: str,
        night: str,
        labels: Mapping[str, str] | None = None,
        log: logging.Logger | None = None,
        stop: threading.Event | None = None,
    ) -> TpuVm:
        """A VM for one run, as a context manager: created and READY inside `with`, deleted after."""
        from nightly_assets.tpu.session import TpuVm  # paramiko: for a run, not for loading

        settings = self.settings()
        return TpuVm(
            self.nodes(), target, settings, run_id=run_id, night=night, labels=labels, log=log, stop=stop
        )

    def run_suite(
        self,
        target: TpuTarget,
        suite: TpuSuite,
        *,
        run_id: str,
        night: str,
        out_dir: Path,
        labels: Mapping[str, str] | None = None,
        on_output: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
        stop: threading.Event | None = None,
    ) -> TpuRunOutcome:
        """Create a VM, run `suite` on it, fetch its files into `out_dir`, delete the VM.

        Returns the outcome whatever happened on the VM (`reason` says what). Raises TpuQuotaError
        when no VM could be created (nothing to pay for, nothing left), and re-raises an interrupt
        after the VM is deleted (its outcome is on the exception as `tpu_outcome`). `stop`, set from
        another thread, ends the suite early (reason cancelled) and deletes the VM.
        """
        vm = self.vm(target, run_id=run_id, night=night, labels=labels, log=log, stop=stop)
        try:
            with vm:
                vm.run(suite, out_dir, on_output=on_output)
        except TpuNotReadyError:
            pass  # the VM existed and cost money: the outcome (reason not_ready) says so
        except BaseException as exc:
            if vm.outcome is not None:
                exc.tpu_outcome = vm.outcome  # type: ignore[attr-defined]
            raise
        assert vm.outcome is not None
        return vm.outcome

    def sweep(
        self,
        zones: Iterable[str],
        alive_run_ids: Iterable[str],
        *,
        min_age_s: float = 900.0,
        ended_run_ids: Iterable[str] | None = None,
        log: logging.Logger | None = None,
    ) -> list[str]:
        """Delete this tool's nodes whose run is not alive; the names deleted.

        `min_age_s` spares nodes younger than that: a run that started after the caller listed
        the alive runs has a node but is not in `alive_run_ids` yet. With `ended_run_ids`, only
        the nodes of those runs go (runs known to have ended), whatever their age.
        """
        return sweep_orphans(
            self.nodes(),
            zones,
            alive_run_ids,
            min_age_s=min_age_s,
            ended_run_ids=ended_run_ids,
            delete_timeout_s=float(self.delete_timeout_s),
            poll_interval_s=float(self.poll_interval_s),
            log=log or _log,
        )


# A run in one of these may still own a VM; any other state means its VM is an orphan.
ALIVE_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def alive_run_ids(instance: dg.DagsterInstance) -> list[str]:
    return [r.run_id for r in instance.get_runs(filters=dg.RunsFilter(statuses=ALIVE_STATUSES))]


def recently_ended_run_ids(instance: dg.DagsterInstance, days: int = 7) -> list[str]:
    """Runs of this instance that ended in the last `days` (their VMs, if any, are leftovers)."""
    since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)
    finished = [s for s in dg.DagsterRunStatus if s not in ALIVE_STATUSES]
    return [
        r.run_id for r in instance.get_runs(filters=dg.RunsFilter(statuses=finished, updated_after=since))
    ]


def sweep_orphans(
    nodes: TpuNodes,
    zones: Iterable[str],
    alive_run_ids: Iterable[str],
    *,
    min_age_s: float,
    delete_timeout_s: float,
    poll_interval_s: float,
    log: logging.Logger,
    ended_run_ids: Iterable[str] | None = None,
) -> list[str]:
    alive = {label_value(run_id) for run_id in alive_run_ids}
    ended = None if ended_run_ids is None else {label_value(run_id) for run_id in ended_run_ids}
    deleted: list[str] = []
    failures: list[str] = []
    for zone in zones:
        # Queued resources too: one still waiting for capacity has no node yet.
        for node_id, labels, age in [*nodes.list_tool_nodes(zone), *nodes.list_tool_queued(zone)]:
            name = nodes.node_name(zone, node_id)
            if ended is not None:
                if labels.get(RUN_LABEL) not in ended or name in deleted:
                    continue
            elif labels.get(RUN_LABEL) in alive or name in deleted or (age is not None and age < min_age_s):
                continue
            try:
                nodes.delete(zone, node_id, delete_timeout_s, poll_interval_s)
            except TpuApiError as exc:
                failures.append(str(exc))
                continue
            log.warning("swept TPU node %s (run %s is not alive)", name, labels.get(RUN_LABEL, "?"))
            deleted.append(name)
    if failures:
        raise TpuApiError(f"the sweeper deleted {len(deleted)} node(s) but failed on: " + "; ".join(failures))
    return deleted
