"""What a TPU run is given (target, suite, settings) and what it gives back (outcome)."""

from __future__ import annotations

import datetime
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Reason = Literal[
    "preempted",  # the node went PREEMPTED/TERMINATED under the suite
    "vm_lost",  # the node vanished or left READY for another reason
    "timeout",  # the suite ran past its timeout
    "ssh_dropped",  # the SSH connection died while the node stayed READY
    "ssh_unreachable",  # the READY node never let us in
    "host_key_mismatch",  # the VM's host key is not the one its node published
    "not_ready",  # the node did not get READY in time
    "quota",  # no capacity/quota for the accelerator type in the zone
    "killed",  # the suite died of a signal (no exit status)
    "cancelled",  # the run was interrupted (KeyboardInterrupt, Dagster termination)
    "error",  # anything else raised in the block
]


@dataclass(frozen=True)
class TpuTarget:
    """What to create and where: a catalog target's params (defs/tpu/defs.yaml)."""

    zone: str
    accelerator_type: str
    runtime_version: str
    preemptible: bool = True
    spot: bool = False
    hourly_usd: float = 0.0
    queued_resource: bool = False  # ask through the QueuedResources API (waits for capacity)
    # The most VMs a sharded suite holds at once (the project's TPU quota in the zone, or what the
    # team may spend at a time); None: one per shard, all at once.
    max_vms: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, object], target: str = "tpu") -> TpuTarget:
        """From a catalog target's `params`; a bad or missing one is named in the error."""
        values: dict[str, object] = {}
        for name in ("zone", "accelerator_type", "runtime_version"):
            value = params.get(name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"target {target!r}: params.{name} must be a non-empty string, got {value!r}"
                )
            values[name] = value.strip()
        for name in ("preemptible", "spot", "queued_resource"):
            value = params.get(name, name == "preemptible")
            if not isinstance(value, bool):
                raise ValueError(f"target {target!r}: params.{name} must be true or false, got {value!r}")
            values[name] = value
        cost = params.get("hourly_usd", 0.0)
        if isinstance(cost, bool) or not isinstance(cost, int | float) or cost < 0:
            raise ValueError(f"target {target!r}: params.hourly_usd must be a number >= 0, got {cost!r}")
        max_vms = params.get("max_vms")
        if max_vms is not None and (isinstance(max_vms, bool) or not isinstance(max_vms, int) or max_vms < 1):
            raise ValueError(
                f"target {target!r}: params.max_vms must be a whole number >= 1, got {max_vms!r}"
            )
        return cls(hourly_usd=float(cost), max_vms=max_vms, **values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TpuSuite:
    """What runs on the VM: argv (never a shell string), files to upload and to fetch back."""

    argv: Sequence[str]
    junit_file: str | None = None  # e.g. what `pytest --junitxml=` wrote, relative to the work dir
    timing_file: str | None = None
    uploads: Mapping[str, Path] = field(default_factory=dict)  # remote path under the work dir -> local
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 1200.0
    fetch: Sequence[str] = ()  # more files to bring back (relative to the work dir, or absolute)

    def __post_init__(self) -> None:
        """Checked before any VM is made: a bad suite must not cost a VM."""
        from nightly_assets.tpu import ssh  # its paramiko is for a run, not for loading the catalog

        ssh.remote_command(".", self.argv, self.env)  # argv and env names
        for name in self.uploads:
            ssh.check_remote_name(name, "upload")
        wanted = self.fetched_names()
        basenames = [posixpath.basename(ssh.check_fetch_name(name)) for name in wanted]
        clashes = sorted({b for b in basenames if basenames.count(b) > 1})
        if clashes:
            raise ValueError(
                f"suite fetch: {', '.join(clashes)} named twice: fetched files land in one folder"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"suite timeout_s: expected a number of seconds > 0, got {self.timeout_s}")

    def fetched_names(self) -> list[str]:
        """The files to bring back: the JUnit report, the timing JSON, then `fetch`."""
        return [name for name in (self.junit_file, self.timing_file, *self.fetch) if name]


@dataclass(frozen=True)
class TpuVmSettings:
    """The resource's configuration, as the session uses it."""

    ssh_user: str
    ssh_port: int
    ready_timeout_s: float
    poll_interval_s: float
    delete_timeout_s: float
    ssh_connect_timeout_s: float
    create_retry_s: float
    ssh_keepalive_s: int
    use_internal_ip: bool
    use_queued_resource: bool
    check_host_keys: bool
    remote_root: str
    node_prefix: str


@dataclass(frozen=True)
class TpuRunOutcome:
    node_name: str
    zone: str
    accelerator_type: str
    created_at: datetime.datetime  # when the create was requested
    deleted_at: datetime.datetime | None  # when the delete was confirmed (None: not confirmed)
    lifetime_s: float
    cost_usd: float
    reason: Reason | None  # None: the suite ran to its end; exit_code says how it went
    detail: str = ""
    exit_code: int | None = None
    log_path: Path | None = None
    fetched: Mapping[str, Path] = field(default_factory=dict)  # remote name -> local path
    junit_path: Path | None = None
    timing_path: Path | None = None
    delete_error: str | None = None  # the node may be left: the sweeper will delete it

    @property
    def completed(self) -> bool:
        return self.reason is None
