"""The Cloud TPU API calls a run's VM needs (create, wait for READY, delete, list, host keys),
through google-cloud-tpu's `TpuClient`, directly or through a queued resource."""

from __future__ import annotations

import base64
import binascii
import datetime
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # google's client libraries cost ~0.5 s to import: only a run that calls the API pays it
    from google.api_core import exceptions as api_exceptions
    from google.api_core import operation
    from google.api_core import retry as api_retry
    from google.cloud import tpu_v2

TOOL_LABEL = "nightly-assets"  # every node this tool makes carries nightly-assets=1 (the sweeper's key)
RUN_LABEL = "nightly-run-id"
NIGHT_LABEL = "nightly-night"
HOST_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa")  # pinned in this order of preference
_LABEL_VALUE_BAD = re.compile(r"[^a-z0-9_-]+")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_NODE_ID_BAD = re.compile(r"[^a-z0-9-]+")
# States after which a node never gets READY again (a spot/preemptible VM that was taken back).
GONE_STATES = frozenset({"PREEMPTED", "TERMINATED", "STOPPED", "STOPPING", "DELETING", "HIDDEN"})


class TpuApiError(RuntimeError):
    """The TPU API refused or failed a request; the message names the node and the call."""


class TpuQuotaError(TpuApiError):
    """No capacity or quota for the accelerator type in the zone (HTTP 429 RESOURCE_EXHAUSTED)."""


class TpuNotReadyError(TpuApiError):
    """The node did not reach READY in time, or its creation failed."""


def label_value(text: str) -> str:
    """`text` as a GCP label value: lowercase letters, digits, `_` and `-`, at most 63 characters."""
    return _LABEL_VALUE_BAD.sub("-", text.lower())[:63]


def check_label_key(key: str) -> str:
    if _LABEL_KEY.fullmatch(key) is None:
        raise ValueError(
            f"label key {key!r}: expected 1-63 lowercase letters, digits, '_' or '-', starting with a letter"
        )
    return key


def node_id_for(prefix: str, run_id: str, suffix: str) -> str:
    """A node ID (lowercase, digits, `-`, starts with a letter, at most 63) naming the run."""
    run_part = _NODE_ID_BAD.sub("-", run_id.lower()).strip("-")[:24] or "run"
    node_id = f"{_NODE_ID_BAD.sub('-', prefix.lower()).strip('-') or 'nightly'}-{run_part}-{suffix}"
    if not node_id[0].isalpha():
        node_id = f"n-{node_id}"
    return node_id[:63].rstrip("-")


@dataclass(frozen=True)
class NodeRequest:
    zone: str
    node_id: str
    accelerator_type: str
    runtime_version: str
    preemptible: bool
    spot: bool
    labels: Mapping[str, str]
    metadata: Mapping[str, str]
    external_ip: bool = True


def state_name(node: tpu_v2.Node) -> str:
    from google.cloud import tpu_v2

    return tpu_v2.Node.State(node.state).name


def node_address(node: tpu_v2.Node, internal: bool) -> str:
    """The address SSH reaches: the first worker's external IP, or its internal one."""
    if not node.network_endpoints:
        raise TpuApiError(f"node {node.name} is READY but lists no network endpoint to reach it")
    endpoint = node.network_endpoints[0]
    address = endpoint.ip_address if internal else (endpoint.access_config.external_ip or endpoint.ip_address)
    if not address:
        raise TpuApiError(f"node {node.name} has no {'internal' if internal else 'external or internal'} IP")
    return str(address)


def _transient_retry(timeout_s: float) -> api_retry.Retry:
    """Only transient answers are retried: a 4xx on delete means the request itself is wrong."""
    from google.api_core import exceptions as api_exceptions
    from google.api_core import retry as api_retry

    transient = api_retry.if_exception_type(
        api_exceptions.ServiceUnavailable,
        api_exceptions.InternalServerError,
        api_exceptions.BadGateway,
        api_exceptions.GatewayTimeout,
        api_exceptions.TooManyRequests,
        api_exceptions.DeadlineExceeded,
        ConnectionError,
    )
    return api_retry.Retry(predicate=transient, initial=0.5, maximum=10.0, timeout=timeout_s)


class TpuNodes:
    """One project's TPU nodes; `call_timeout_s` bounds every API call (the client sets none)."""

    def __init__(self, client: tpu_v2.TpuClient, project: str, call_timeout_s: float = 60.0) -> None:
        self.client = client
        self.project = project
        self.timeout = call_timeout_s
        # Reads and deletes are retried on transient errors; a create is not (a lost answer
        # would make the retry a 409, and the run deletes by its known node ID anyway).
        self._retry = _transient_retry(call_timeout_s * 3)

    def parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def node_name(self, zone: str, node_id: str) -> str:
        return f"{self.parent(zone)}/nodes/{node_id}"

    def queued_name(self, zone: str, node_id: str) -> str:
        return f"{self.parent(zone)}/queuedResources/{node_id}"

    def create(self, request: NodeRequest, queued: bool, retry_s: float = 0.0) -> operation.Operation | None:
        """Ask for the node (or a queued resource of the same ID holding it); does not wait.

        A 429 / RESOURCE_EXHAUSTED answer (rate limit, or no capacity now) is asked again with
        backoff for up to `retry_s`, as the API asks. Returns None when a retry found the node
        already there (an earlier attempt made it after all)."""
        from google.api_core import exceptions as api_exceptions

        deadline = time.monotonic() + retry_s
        pause, attempts = 1.0, 0
        while True:
            attempts += 1
            try:
                return self._create_once(request, queued)
            except api_exceptions.AlreadyExists:
                if attempts > 1:
                    return None  # the answer to an earlier attempt was lost, not its effect
                raise TpuApiError(
                    f"creating TPU node {request.node_id} in {request.zone}: it already exists"
                ) from None
            except (api_exceptions.TooManyRequests, api_exceptions.ResourceExhausted) as exc:
                if time.monotonic() + pause > deadline:
                    waited = f" (asked {attempts} times over {retry_s:g} s)" if attempts > 1 else ""
                    raise TpuQuotaError(
                        _quota_message(request, f"{exc.message}{waited}", created=False)
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 60.0)

    def _create_once(self, request: NodeRequest, queued: bool) -> operation.Operation:
        from google.api_core import exceptions as api_exceptions
        from google.cloud import tpu_v2

        node = tpu_v2.Node(
            accelerator_type=request.accelerator_type,
            runtime_version=request.runtime_version,
            scheduling_config=tpu_v2.SchedulingConfig(
                preemptible=request.preemptible and not queued, spot=request.spot and not queued
            ),
            labels=dict(request.labels),
            metadata=dict(request.metadata),
            network_config=tpu_v2.NetworkConfig(enable_external_ips=request.external_ip),
        )
        parent = self.parent(request.zone)
        try:
            if queued:
                # A queued resource's tier replaces the node's scheduling config: spot, or the default.
                spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=parent, node_id=request.node_id, node=node)
                resource = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]))
                if request.spot or request.preemptible:
                    resource.spot = tpu_v2.QueuedResource.Spot()
                return self.client.create_queued_resource(
                    parent=parent,
                    queued_resource=resource,
                    queued_resource_id=request.node_id,
                    timeout=self.timeout,
                )
            return self.client.create_node(
                parent=parent, node=node, node_id=request.node_id, timeout=self.timeout
            )
        except (
            api_exceptions.TooManyRequests,
            api_exceptions.ResourceExhausted,
            api_exceptions.AlreadyExists,
        ):
            raise  # create() decides
        except api_exceptions.GoogleAPICallError as exc:
            raise TpuApiError(
                f"creating TPU node {request.node_id} in {request.zone}: {_describe(exc)}"
            ) from None

    def get(self, name: str) -> tpu_v2.Node | None:
        """The node, or None when it does not exist (any more)."""
        from google.api_core import exceptions as api_exceptions

        try:
            return self.client.get_node(name=name, timeout=self.timeout, retry=self._retry)
        except api_exceptions.NotFound:
            return None

    def queued_state(self, name: str) -> tuple[str, str] | None:
        """A queued resource's state name and, when FAILED, why; None when it does not exist."""
        from google.api_core import exceptions as api_exceptions

        try:
            resource = self.client.get_queued_resource(name=name, timeout=self.timeout, retry=self._retry)
        except api_exceptions.NotFound:
            return None
        from google.cloud import tpu_v2

        state = tpu_v2.QueuedResourceState.State(resource.state.state).name
        return state, resource.state.failed_data.error.message

    def wait_ready(
        self,
        request: NodeRequest,
        creation: operation.Operation | None,
        queued: bool,
        timeout_s: float,
        poll_s: float,
    ) -> tpu_v2.Node:
        """Poll until the node is READY; TpuNotReadyError (or TpuQuotaError) when it will not be."""
        name = self.node_name(request.zone, request.node_id)
        deadline = time.monotonic() + timeout_s
        seen = "not created yet"
        while True:
            if queued:
                queued_state = self.queued_state(self.queued_name(request.zone, request.node_id))
                if queued_state is not None and queued_state[0] == "FAILED":
                    if "quota" in queued_state[1].lower() or "RESOURCE_EXHAUSTED" in queued_state[1]:
                        raise TpuQuotaError(_quota_message(request, queued_state[1], created=True))
                    raise TpuNotReadyError(f"queued resource for {name} FAILED: {queued_state[1]}")
                seen = f"queued resource {queued_state[0] if queued_state else 'missing'}"
            node = self.get(name)
            if node is not None:
                seen = state_name(node)
                if seen == "READY":
                    return node
                if seen in GONE_STATES:
                    raise TpuNotReadyError(f"node {name} went {seen} before it was READY")
            if not queued and creation is not None:
                self._raise_if_creation_failed(request, creation)
            if time.monotonic() >= deadline:
                raise TpuNotReadyError(
                    f"node {name} was not READY after {timeout_s:g} s (last state: {seen})"
                )
            time.sleep(poll_s)

    def _raise_if_creation_failed(self, request: NodeRequest, creation: operation.Operation) -> None:
        """Capacity errors often come back on the create operation, not on the create call."""
        from google.api_core import exceptions as api_exceptions

        if not creation.done(retry=self._retry):
            return
        error = creation.exception()
        if error is None:
            return
        text = getattr(error, "message", str(error))
        if isinstance(error, (api_exceptions.ResourceExhausted, api_exceptions.TooManyRequests)):
            raise TpuQuotaError(_quota_message(request, text, created=True))
        raise TpuNotReadyError(f"creating node {request.node_id} in {request.zone} failed: {text}")

    def host_keys(self, name: str) -> dict[str, str]:
        """The SSH host keys the VM's guest agent published (type -> base64), as gcloud reads them."""
        from google.api_core import exceptions as api_exceptions
        from google.cloud import tpu_v2

        try:
            answer = self.client.get_guest_attributes(
                request=tpu_v2.GetGuestAttributesRequest(name=name, query_path="hostkeys/"),
                timeout=self.timeout,
            )
        except (api_exceptions.NotFound, api_exceptions.InvalidArgument):
            return {}
        keys: dict[str, str] = {}
        for attributes in answer.guest_attributes:
            for item in attributes.query_value.items:
                value = item.value.split()[0] if item.value.split() else ""
                if item.key in HOST_KEY_TYPES and _is_base64(value):
                    keys.setdefault(item.key, value)
        return keys

    def delete(self, zone: str, node_id: str, timeout_s: float, poll_s: float) -> None:
        """Delete the node (through its queued resource when it has one) and wait until it is gone.

        Idempotent: what is already gone is fine. Transient API errors are retried until `timeout_s`.
        """
        from google.cloud import tpu_v2

        name, queued_name = self.node_name(zone, node_id), self.queued_name(zone, node_id)
        if self.queued_state(queued_name) is not None:
            # force: the queued resource takes its node with it (a node of a queued resource
            # cannot be deleted on its own).
            request = tpu_v2.DeleteQueuedResourceRequest(name=queued_name, force=True)
            self._call_absent_ok(self.client.delete_queued_resource, queued_name, timeout_s, request=request)
        else:
            node = self.get(name)
            if node is not None and state_name(node) != "DELETING":
                request_node = tpu_v2.DeleteNodeRequest(name=name)
                self._call_absent_ok(self.client.delete_node, name, timeout_s, request=request_node)
        deadline = time.monotonic() + timeout_s
        while self.get(name) is not None or self.queued_state(queued_name) is not None:
            if time.monotonic() >= deadline:
                raise TpuApiError(f"node {name} still exists {timeout_s:.0f} s after its deletion was asked")
            time.sleep(poll_s)

    def _call_absent_ok(
        self, call: Callable[..., object], name: str, timeout_s: float, **kwargs: object
    ) -> None:
        """A delete call, retried on transient errors for up to `timeout_s`; NotFound is success."""
        from google.api_core import exceptions as api_exceptions

        retry = _transient_retry(timeout_s)
        try:
            call(timeout=self.timeout, retry=retry, **kwargs)
        except api_exceptions.NotFound:
            return
        except api_exceptions.GoogleAPICallError as exc:
            raise TpuApiError(f"deleting {name}: {_describe(exc)}") from None
        except api_exceptions.RetryError as exc:
            cause = exc.cause
            why = _describe(cause) if isinstance(cause, api_exceptions.GoogleAPICallError) else str(cause)
            raise TpuApiError(f"deleting {name}: still failing after {timeout_s:g} s: {why}") from None

    def list_tool_nodes(self, zone: str) -> list[tuple[str, dict[str, str], float | None]]:
        """The zone's nodes carrying this tool's label: (node ID, labels, age in s or None)."""
        pages = self.client.list_nodes(parent=self.parent(zone), timeout=self.timeout, retry=self._retry)
        return [
            (node.name.rsplit("/", 1)[-1], dict(node.labels), _age_s(node.create_time))
            for node in pages
            if node.labels.get(TOOL_LABEL) == "1"
        ]

    def list_tool_queued(self, zone: str) -> list[tuple[str, dict[str, str], float | None]]:
        """The zone's queued resources whose node spec carries this tool's label, as above."""
        pages = self.client.list_queued_resources(
            parent=self.parent(zone), timeout=self.timeout, retry=self._retry
        )
        found = []
        for resource in pages:
            for spec in resource.tpu.node_spec:
                if spec.node.labels.get(TOOL_LABEL) == "1":
                    found.append((spec.node_id, dict(spec.node.labels), _age_s(resource.create_time)))
        return found


def _age_s(created: datetime.datetime | None) -> float | None:
    if not isinstance(created, datetime.datetime) or created.year < 2000:
        return None
    return (datetime.datetime.now(datetime.UTC) - created).total_seconds()


def _is_base64(value: str) -> bool:
    try:
        return base64.b64encode(base64.b64decode(value, validate=True)).decode() == value
    except (binascii.Error, ValueError):
        return False


def _quota_message(request: NodeRequest, detail: str, *, created: bool) -> str:
    made = "the request had made a node, which is deleted now" if created else "nothing was created"
    return (
        f"no TPU capacity: quota exhausted for accelerator type {request.accelerator_type} in zone "
        f"{request.zone} (RESOURCE_EXHAUSTED: {detail}); {made}. Ask for quota in that zone, "
        "pick another zone in the catalog target, or retry later"
    )


def _describe(exc: api_exceptions.GoogleAPICallError) -> str:
    return f"HTTP {exc.code} {type(exc).__name__}: {exc.message}"
