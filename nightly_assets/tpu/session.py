"""One run's TPU VM, from the create request to the confirmed delete, as a context manager: the
node is deleted however the block ends (success, failure, timeout, lost SSH, preemption, a
KeyboardInterrupt or Dagster's DagsterExecutionInterruptedError), and `outcome` says why it
ended and what its lifetime cost."""

from __future__ import annotations

import datetime
import logging
import posixpath
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

import dagster as dg
import paramiko

from nightly_assets.interrupts import deferred_interrupts
from nightly_assets.tpu import ssh
from nightly_assets.tpu.models import Reason, TpuRunOutcome, TpuSuite, TpuTarget, TpuVmSettings
from nightly_assets.tpu.nodes import (
    NIGHT_LABEL,
    RUN_LABEL,
    TOOL_LABEL,
    NodeRequest,
    TpuNodes,
    TpuNotReadyError,
    TpuQuotaError,
    check_label_key,
    label_value,
    node_address,
    node_id_for,
    state_name,
)

_PREEMPTED_STATES = frozenset({"PREEMPTED", "TERMINATED"})


class TpuVm:
    """`with TpuVm(...) as vm: vm.run(suite, out_dir)`; read `vm.outcome` after the block."""

    def __init__(
        self,
        nodes: TpuNodes,
        target: TpuTarget,
        settings: TpuVmSettings,
        *,
        run_id: str,
        night: str,
        labels: Mapping[str, str] | None = None,
        log: logging.Logger | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.nodes, self.target, self.settings = nodes, target, settings
        # Set from another thread (an interrupted night's shard): the suite is stopped at the next
        # state poll, and the VM deleted as always.
        self.stop = stop
        self.log = log or logging.getLogger(__name__)
        self.node_id = node_id_for(settings.node_prefix, run_id, secrets.token_hex(3))
        self.node_name = nodes.node_name(target.zone, self.node_id)
        self.labels = {check_label_key(k): label_value(v) for k, v in (labels or {}).items()}
        self.labels.update({TOOL_LABEL: "1", RUN_LABEL: label_value(run_id), NIGHT_LABEL: label_value(night)})
        self.address: str | None = None
        self.outcome: TpuRunOutcome | None = None
        self._key: ssh.SshKeyPair | None = None
        self._may_exist = False
        self._reason: Reason | None = None
        self._detail = ""
        self._exit_code: int | None = None
        self._log_path: Path | None = None
        self._fetched: dict[str, Path] = {}
        self._suite: TpuSuite | None = None
        self._created_at = datetime.datetime.now(datetime.UTC)
        self._started = time.monotonic()

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> TpuVm:
        self._created_at, self._started = datetime.datetime.now(datetime.UTC), time.monotonic()
        try:
            self._create()
        except BaseException as exc:
            self._finish(exc)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._finish(exc)

    def _create(self) -> None:
        user = self.settings.ssh_user
        self._key = ssh.new_ssh_key(comment=user)
        request = NodeRequest(
            zone=self.target.zone,
            node_id=self.node_id,
            accelerator_type=self.target.accelerator_type,
            runtime_version=self.target.runtime_version,
            preemptible=self.target.preemptible,
            spot=self.target.spot,
            labels=self.labels,
            metadata={"ssh-keys": f"{user}:{self._key.public_line}", "enable-guest-attributes": "TRUE"},
            external_ip=not self.settings.use_internal_ip,
        )
        queued = self.settings.use_queued_resource or self.target.queued_resource
        self._may_exist = True  # a create whose answer is lost may still have made the node
        self.log.info(
            "creating TPU node %s (%s in %s)", self.node_name, request.accelerator_type, request.zone
        )
        try:
            creation = self.nodes.create(request, queued=queued, retry_s=self.settings.create_retry_s)
        except TpuQuotaError:
            self._may_exist = False  # refused outright: there is nothing to delete or pay for
            raise
        node = self.nodes.wait_ready(
            request, creation, queued, self.settings.ready_timeout_s, self.settings.poll_interval_s
        )
        self.address = node_address(node, internal=self.settings.use_internal_ip)
        self.log.info("TPU node %s is READY at %s:%d", self.node_name, self.address, self.settings.ssh_port)

    def _finish(self, exc: BaseException | None) -> None:
        """Delete the node (always), then record the outcome. Never masks the block's exception."""
        if exc is not None and self._reason is None:
            self._stop(_reason_for(exc), f"{type(exc).__name__}: {exc}")
        deleted_at, delete_error = None, None
        interrupts: list[int] = []
        if self._may_exist:
            # A second interrupt must not cut the delete short: it would leave a READY node. It is
            # raised once the outcome (the cost row's source) is recorded.
            with deferred_interrupts(
                self.log, f"deleting TPU node {self.node_name}", reraise=False
            ) as interrupts:
                try:
                    self.nodes.delete(
                        self.target.zone,
                        self.node_id,
                        self.settings.delete_timeout_s,
                        self.settings.poll_interval_s,
                    )
                    deleted_at = datetime.datetime.now(datetime.UTC)
                except Exception as error:
                    delete_error = f"{type(error).__name__}: {error}"
                    self.log.error(
                        "TPU node %s may be left running (the sweeper deletes it): %s", self.node_name, error
                    )
        lifetime_s = time.monotonic() - self._started if self._may_exist else 0.0
        suite = self._suite
        self.outcome = TpuRunOutcome(
            node_name=self.node_name,
            zone=self.target.zone,
            accelerator_type=self.target.accelerator_type,
            created_at=self._created_at,
            deleted_at=deleted_at if self._may_exist else self._created_at,
            lifetime_s=lifetime_s,
            cost_usd=lifetime_s / 3600 * self.target.hourly_usd,
            reason=self._reason,
            detail=self._detail,
            exit_code=self._exit_code,
            log_path=self._log_path,
            fetched=dict(self._fetched),
            junit_path=self._fetched.get(suite.junit_file) if suite and suite.junit_file else None,
            timing_path=self._fetched.get(suite.timing_file) if suite and suite.timing_file else None,
            delete_error=delete_error,
        )
        self.log.info(
            "TPU node %s deleted=%s after %.0f s: $%.4f (%s)",
            self.node_name,
            delete_error is None,
            lifetime_s,
            self.outcome.cost_usd,
            self._reason or "completed",
        )
        # A delete that never finished does not discard the suite's results: the stage keeps them
        # and reports the leak (outcome.delete_error); the sweeper deletes the node later.
        if interrupts and exc is None:
            raise KeyboardInterrupt(f"interrupted while deleting TPU node {self.node_name}")

    def _stop(self, reason: Reason, detail: str) -> None:
        self._reason, self._detail = reason, detail
        self.log.warning("TPU node %s: %s (%s)", self.node_name, reason, detail)

    # -- the suite ----------------------------------------------------------------------------

    @property
    def workdir(self) -> str:
        """The run's folder on the VM (relative paths are under the SSH user's home)."""
        return posixpath.join(self.settings.remote_root or ".", "nightly-runs", self.node_id)

    def run(self, suite: TpuSuite, out_dir: Path, on_output: Callable[[str], None] | None = None) -> None:
        """Upload, run `suite.argv` under its timeout, fetch its files into `out_dir`.

        Problems of the VM (preemption, lost SSH, timeout) end up in `outcome.reason`, not raised;
        an interrupt (and any other exception) propagates after the remote suite is stopped.
        """
        if self.address is None or self._key is None:
            raise RuntimeError("TpuVm.run: the VM is not up; use it inside `with TpuVm(...) as vm:`")
        self._suite = suite
        command = ssh.remote_command(self.workdir, suite.argv, suite.env)
        out_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = out_dir / "suite.log"
        self._log_path.write_bytes(b"")
        host_keys = self.nodes.host_keys(self.node_name) if self.settings.check_host_keys else {}
        try:
            client = ssh.connect(
                self.address,
                self.settings.ssh_port,
                self.settings.ssh_user,
                self._key,
                host_keys,
                self.settings.ssh_connect_timeout_s,
                self.settings.ssh_keepalive_s,
                self.log,
                check=self._node_trouble,
            )
        except ssh.SshHostKeyMismatch as exc:
            return self._stop("host_key_mismatch", str(exc))
        except ssh.SshError as exc:
            reason: Reason = "cancelled" if self._stopping() else self._why_lost("ssh_unreachable")
            return self._stop(reason, str(exc))
        with client:
            self._run_connected(client, suite, command, out_dir, on_output)

    def _run_connected(
        self,
        client: paramiko.SSHClient,
        suite: TpuSuite,
        command: str,
        out_dir: Path,
        on_output: Callable[[str], None] | None,
    ) -> None:
        assert self._log_path is not None
        try:
            with client.open_sftp() as sftp:
                ssh.sftp_makedirs(sftp, self.workdir)
                ssh.upload(sftp, suite.uploads, self.workdir)
            self.log.info("TPU node %s: running %s", self.node_name, suite.argv[0])
            remote = ssh.run_remote(
                client,
                command,
                self._log_path,
                suite.timeout_s,
                on_output,
                self._node_trouble,
                self.settings.poll_interval_s,
            )
        except ssh.CONNECTION_ERRORS as exc:
            remote = ssh.RemoteExit("connection_lost", None, f"{type(exc).__name__}: {exc}")
        except BaseException:
            ssh.kill_remote(client, self.workdir, self.log)  # stop the suite before the VM goes
            raise
        if remote.ended == "exited":
            self._exit_code = remote.exit_code
            if remote.exit_code is None:
                self._stop("killed", remote.detail)
        elif remote.ended == "timeout":
            self._stop("timeout", remote.detail)
            ssh.kill_remote(client, self.workdir, self.log)
        elif remote.ended == "stopped" and self._stopping():
            self._stop("cancelled", remote.detail)
            ssh.kill_remote(client, self.workdir, self.log)
        elif remote.ended == "stopped":
            self._stop(self._why_lost("vm_lost"), remote.detail)
        else:
            self._stop(self._why_lost("ssh_dropped"), remote.detail)
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            return
        wanted = suite.fetched_names()
        try:
            with client.open_sftp() as sftp:
                self._fetched = ssh.fetch(sftp, wanted, self.workdir, out_dir)
        except ssh.CONNECTION_ERRORS as exc:
            self.log.warning("TPU node %s: fetching %s failed: %s", self.node_name, wanted, exc)
        missing = [name for name in wanted if name not in self._fetched]
        if missing:
            self.log.warning("TPU node %s: not found on the VM: %s", self.node_name, ", ".join(missing))

    def _node_state(self) -> str | None:
        """The node's state name, "GONE" when it no longer exists, None when the API did not say."""
        try:
            node = self.nodes.get(self.node_name)
        except Exception as exc:  # an API hiccup must not end a healthy run
            self.log.info("TPU node %s: state unknown (%s)", self.node_name, type(exc).__name__)
            return None
        return "GONE" if node is None else state_name(node)

    def _stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def _node_trouble(self) -> str | None:
        if self._stopping():
            return "the run was interrupted"
        state = self._node_state()
        return None if state in (None, "READY") else f"the node went {state} while the suite ran"

    def _why_lost(self, otherwise: Reason) -> Reason:
        """Ask the API what a lost connection means: a preempted VM, a vanished one, or just SSH."""
        state = self._node_state()
        if state in _PREEMPTED_STATES:
            return "preempted"
        if state is not None and state != "READY":
            return "vm_lost"
        return otherwise


def _reason_for(exc: BaseException) -> Reason:
    if isinstance(exc, KeyboardInterrupt | dg.DagsterExecutionInterruptedError):
        return "cancelled"
    if isinstance(exc, TpuQuotaError):
        return "quota"
    if isinstance(exc, TpuNotReadyError):
        return "not_ready"
    return "error"
