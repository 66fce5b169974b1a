"""A fake of the Cloud TPU v2 REST API, enough for the real ``google.cloud.tpu_v2.TpuClient``
(``transport="rest"``) to create, get, list and delete nodes and queued resources, poll their
long-running operations and read a node's guest attributes (its SSH host keys).

Nodes live in memory and move through their states on a background ticker, so scripted faults
happen on time whoever is polling: ``provisioning_delay_s`` (CREATING -> READY), ``never_ready``,
``quota_exhausted`` (429 RESOURCE_EXHAUSTED on create), ``rate_limited_creates`` (that many 429s,
then the create goes through), ``delete_answer_delay_s``, ``preempt_after_s`` (READY -> PREEMPTED,
then ``on_preempt(node_name)`` so a test can kill the "VM"; ``preempt_if`` picks nodes by their
labels), ``delete_delay_s``. ``most_nodes`` is the most nodes that existed at once.

The "VM" is the loopback sshd: every READY node's ``ssh-keys`` metadata is written into
``authorized_keys``, so the key the orchestrator put in the node is what lets it in, and only
while the node is READY.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from nightly_assets_tests.peers.http_api import FakeHttpServer, Request, Response

LOOPBACK = "127.0.0.1"
TICK_S = 0.05
_OPERATION_METADATA = "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
_PATH = re.compile(
    r"/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)/"
    r"(?P<kind>nodes|queuedResources|operations)(?:/(?P<id>[^/:]+))?(?::(?P<verb>\w+))?"
)


class ApiError(Exception):
    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


@dataclass
class FakeNode:
    name: str
    body: dict[str, Any]
    state: str = "CREATING"
    ready_at: float | None = None
    preempt_at: float | None = None
    gone_at: float | None = None


@dataclass
class FakeQueuedResource:
    name: str
    body: dict[str, Any]
    node_name: str
    node_body: dict[str, Any]
    state: str = "ACCEPTED"
    accepted_until: float = 0.0


@dataclass
class FakeOperation:
    name: str
    target: str
    verb: str  # create | delete | create_queued | delete_queued


@dataclass
class FakeTpuApi:
    """The fake server; attributes below the address are the scripted faults (reset per test)."""

    authorized_keys: Path | None = None
    host_keys: dict[str, str] = field(default_factory=dict)  # "ssh-ed25519" -> base64, per READY node
    external_ip: str = LOOPBACK
    provisioning_delay_s: float = 0.0
    never_ready: bool = False
    quota_exhausted: bool = False
    quota_in_operation: bool = False  # the create call succeeds, its operation fails (RESOURCE_EXHAUSTED)
    preempt_after_s: float | None = None
    delete_delay_s: float = 0.0
    delete_unavailable: bool = False  # every delete answers 503 UNAVAILABLE
    delete_answer_delay_s: float = 0.0  # a delete call takes this long to answer (a slow API)
    rate_limited_creates: int = 0  # this many creates are answered 429 before one is accepted
    queue_delay_s: float = 0.0
    on_preempt: Callable[[str], object] | None = None  # what it returns is ignored
    # Given a node's labels as it gets READY: seconds until it is preempted (None: never), in place
    # of preempt_after_s. Called under the fake's lock: it must not call the fake.
    preempt_if: Callable[[dict[str, str]], float | None] | None = None
    most_nodes: int = 0  # the most nodes that existed at once (a pool's bound)
    on_delete: Callable[[], None] | None = None  # called as a delete call arrives, before it answers
    requests: list[tuple[str, str]] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)  # the body of every create accepted
    nodes: dict[str, FakeNode] = field(default_factory=dict)
    queued: dict[str, FakeQueuedResource] = field(default_factory=dict)
    operations: dict[str, FakeOperation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: FakeHttpServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self.nodes)

    def reset(self) -> None:
        """Forget every node, queued resource and fault: the next test starts from an empty project."""
        with self._lock:
            self.nodes.clear()
            self.queued.clear()
            self.operations.clear()
            self.requests.clear()
            self.created.clear()
            self.provisioning_delay_s = self.delete_delay_s = self.queue_delay_s = 0.0
            self.never_ready = self.quota_exhausted = self.quota_in_operation = False
            self.delete_unavailable = False
            self.delete_answer_delay_s = 0.0
            self.rate_limited_creates = 0
            self.preempt_after_s = None
            self.on_preempt = None
            self.preempt_if = None
            self.most_nodes = 0
            self.on_delete = None
            self._write_authorized_keys()

    def add_node(self, zone: str, node_id: str, labels: dict[str, str], age_s: float = 0.0) -> str:
        """A READY node made outside any run (a leftover), for the sweeper's tests."""
        name = f"projects/test-project/locations/{zone}/nodes/{node_id}"
        created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=age_s)
        body = {"acceleratorType": "v6e-1", "labels": labels, "createTime": _rfc3339(created)}
        with self._lock:
            self.nodes[name] = FakeNode(name, body, state="READY")
        return name

    def preempt(self, name: str) -> None:
        """Take the READY node back now, as Compute Engine does to a preemptible VM."""
        with self._lock:
            node = self._get(self.nodes, name)
            node.preempt_at = time.monotonic()
        self._notify(self._advance(time.monotonic()))

    # -- the state machine --------------------------------------------------------------------

    def _tick(self) -> None:
        while not self._stopping.wait(TICK_S):
            self._notify(self._advance(time.monotonic()))

    def _notify(self, preempted: list[str]) -> None:
        if self.on_preempt is not None:
            for name in preempted:
                self.on_preempt(name)

    def _advance(self, now: float) -> list[str]:
        preempted: list[str] = []
        with self._lock:
            for queued in list(self.queued.values()):
                if queued.state == "ACCEPTED" and now >= queued.accepted_until:
                    queued.state = "PROVISIONING"
                    self._start_node(queued.node_name, queued.node_body, now)
                node = self.nodes.get(queued.node_name)
                if queued.state == "PROVISIONING" and node is not None and node.state == "READY":
                    queued.state = "ACTIVE"
            for node in list(self.nodes.values()):
                if node.state == "CREATING" and node.ready_at is not None and now >= node.ready_at:
                    node.state = "READY"
                    after = self.preempt_after_s
                    if self.preempt_if is not None:
                        after = self.preempt_if(dict(node.body.get("labels", {})))
                    if after is not None:
                        node.preempt_at = now + after
                elif node.state == "READY" and node.preempt_at is not None and now >= node.preempt_at:
                    node.state = "PREEMPTED"
                    preempted.append(node.name)
                elif node.state == "DELETING" and node.gone_at is not None and now >= node.gone_at:
                    del self.nodes[node.name]
            self._write_authorized_keys()
        return preempted

    def _start_node(self, name: str, body: dict[str, Any], now: float) -> FakeNode:
        body = dict(body)
        body["createTime"] = _rfc3339(datetime.datetime.now(datetime.UTC))
        body["networkEndpoints"] = [
            {"ipAddress": "10.0.0.2", "port": 8470, "accessConfig": {"externalIp": self.external_ip}}
        ]
        ready_at = None if self.never_ready else now + self.provisioning_delay_s
        node = FakeNode(name, body, ready_at=ready_at)
        self.nodes[name] = node
        self.most_nodes = max(self.most_nodes, len(self.nodes))
        return node

    def _write_authorized_keys(self) -> None:
        if self.authorized_keys is None:
            return
        lines = []
        for node in self.nodes.values():
            if node.state != "READY":
                continue
            for entry in node.body.get("metadata", {}).get("ssh-keys", "").splitlines():
                _, _, key = entry.partition(":")  # "user:ssh-ed25519 AAAA... comment"
                if key.strip():
                    lines.append(key.strip())
        text = "".join(f"{line}\n" for line in lines)
        if not self.authorized_keys.exists() or self.authorized_keys.read_text() != text:
            self.authorized_keys.write_text(text)

    # -- the API ------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> dict[str, Any]:
        match = _PATH.fullmatch(path)
        if match is None:
            raise ApiError(404, "NOT_FOUND", f"no such path: {path}")
        parent = f"projects/{match['project']}/locations/{match['zone']}"
        kind, ident, verb = match["kind"], match["id"], match["verb"]
        if method == "DELETE" and self.on_delete is not None:
            self.on_delete()
        if method == "DELETE" and self.delete_answer_delay_s:
            time.sleep(self.delete_answer_delay_s)  # outside the lock: other calls go on meanwhile
        with self._lock:
            self.requests.append((method, path))
            if kind == "operations" and method == "GET" and ident:
                return self._operation_json(self._get(self.operations, f"{parent}/operations/{ident}"))
            if kind == "nodes":
                return self._nodes(method, parent, ident, verb, query, body)
            if kind == "queuedResources":
                return self._queued(method, parent, ident, query, body)
        raise ApiError(405, "UNIMPLEMENTED", f"{method} {path} is not implemented by the fake")

    def _nodes(
        self, method: str, parent: str, ident: str | None, verb: str | None, query: dict, body: Any
    ) -> dict[str, Any]:
        if method == "POST" and ident is None:
            self._check_quota(body.get("acceleratorType", "?"), parent)
            name = f"{parent}/nodes/{_required(query, 'nodeId')}"
            if name in self.nodes:
                raise ApiError(409, "ALREADY_EXISTS", f"node {name} already exists")
            self.created.append(body)
            if self.quota_in_operation:
                # As the real API does: the node resource exists (never READY) though its create failed.
                self._start_node(name, body, time.monotonic()).ready_at = None
                return self._new_operation(parent, name, "create_failed")
            self._start_node(name, body, time.monotonic())
            return self._new_operation(parent, name, "create")
        if method == "GET" and ident is None:
            nodes = [n for n in self.nodes.values() if n.name.startswith(f"{parent}/nodes/")]
            return {"nodes": [_node_json(n) for n in nodes], "nextPageToken": ""}
        node = self._get(self.nodes, f"{parent}/nodes/{ident}")
        if method == "GET":
            return _node_json(node)
        if method == "DELETE":
            if self.delete_unavailable:
                raise ApiError(503, "UNAVAILABLE", "The service is currently unavailable.")
            self._delete_node(node)
            return self._new_operation(parent, node.name, "delete")
        if method == "POST" and verb == "getGuestAttributes":
            if node.state != "READY":
                return {"guestAttributes": []}
            items = [{"namespace": "hostkeys", "key": k, "value": v} for k, v in self.host_keys.items()]
            return {"guestAttributes": [{"queryPath": "hostkeys/", "queryValue": {"items": items}}]}
        raise ApiError(405, "UNIMPLEMENTED", f"{method} on a node ({verb}) is not implemented by the fake")

    def _queued(self, method: str, parent: str, ident: str | None, query: dict, body: Any) -> dict[str, Any]:
        if method == "POST" and ident is None:
            spec = body["tpu"]["nodeSpec"][0]
            self._check_quota(spec["node"].get("acceleratorType", "?"), parent)
            name = f"{parent}/queuedResources/{_required(query, 'queuedResourceId')}"
            self.created.append(body)
            node_name = f"{spec['parent']}/nodes/{spec['nodeId']}"
            node_body = {**spec["node"], "queuedResource": name}
            until = time.monotonic() + self.queue_delay_s
            body = {**body, "createTime": _rfc3339(datetime.datetime.now(datetime.UTC))}
            self.queued[name] = FakeQueuedResource(name, body, node_name, node_body, accepted_until=until)
            return self._new_operation(parent, name, "create_queued")
        if method == "GET" and ident is None:
            found = [q for q in self.queued.values() if q.name.startswith(f"{parent}/queuedResources/")]
            return {"queuedResources": [_queued_json(q) for q in found], "nextPageToken": ""}
        queued = self._get(self.queued, f"{parent}/queuedResources/{ident}")
        if method == "GET":
            return _queued_json(queued)
        if method == "DELETE":
            node = self.nodes.get(queued.node_name)
            if node is not None and node.state != "DELETING":
                if query.get("force", [""])[0].lower() != "true":
                    raise ApiError(400, "FAILED_PRECONDITION", f"{queued.name} has a node: delete with force")
                self._delete_node(node)
            del self.queued[queued.name]
            return self._new_operation(parent, queued.name, "delete_queued")
        raise ApiError(405, "UNIMPLEMENTED", f"{method} on a queued resource is not implemented")

    def _check_quota(self, accelerator_type: str, parent: str) -> None:
        if self.rate_limited_creates > 0:
            self.rate_limited_creates -= 1
            raise ApiError(
                429, "RESOURCE_EXHAUSTED", f"Too many requests for {accelerator_type}; retry later"
            )
        if self.quota_exhausted:
            quota = "TPUV6EPreemptiblePerProjectPerZone"
            message = f"Quota limit '{quota}' exceeded for {accelerator_type} in {parent}"
            raise ApiError(429, "RESOURCE_EXHAUSTED", message)

    def _delete_node(self, node: FakeNode) -> None:
        node.state = "DELETING"
        node.gone_at = time.monotonic() + self.delete_delay_s
        if self.delete_delay_s <= 0:
            del self.nodes[node.name]
        self._write_authorized_keys()

    def _new_operation(self, parent: str, target: str, verb: str) -> dict[str, Any]:
        operation = FakeOperation(f"{parent}/operations/operation-{next(self._ids)}", target, verb)
        self.operations[operation.name] = operation
        return self._operation_json(operation)

    def _operation_json(self, operation: FakeOperation) -> dict[str, Any]:
        metadata = {"@type": _OPERATION_METADATA, "target": operation.target, "verb": operation.verb}
        answer: dict[str, Any] = {"name": operation.name, "metadata": metadata, "done": False}
        node = self.nodes.get(operation.target)
        if operation.verb == "create_failed":
            answer["done"] = True
            message = "There is no more capacity in the zone; you can try in another zone (quota exceeded)"
            answer["error"] = {"code": 8, "message": message}
        elif operation.verb == "create" and node is not None and node.state != "CREATING":
            answer["done"] = True
            answer["response"] = {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node", **_node_json(node)}
        elif operation.verb == "create_queued":
            answer["done"] = True
            answer["response"] = {"@type": "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"}
        elif operation.verb.startswith("delete") and (node is None or operation.verb == "delete_queued"):
            answer["done"] = True
            answer["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
        return answer

    @staticmethod
    def _get(table: dict[str, Any], name: str) -> Any:
        if name not in table:
            raise ApiError(404, "NOT_FOUND", f"Resource '{name}' was not found")
        return table[name]

    # -- the server ---------------------------------------------------------------------------

    def start(self) -> FakeTpuApi:
        def respond(request: Request) -> Response:
            try:
                body = json.loads(request.body) if request.body.strip() else {}
                status, answer = 200, self.handle(request.method, request.path, _query(request.query), body)
            except ApiError as error:
                status = error.code
                answer = {"error": {"code": error.code, "message": error.message, "status": error.status}}
            return Response(status, json.dumps(answer).encode())

        self._server = FakeHttpServer(respond, "fake-tpu-api")
        threading.Thread(target=self._tick, daemon=True, name="fake-tpu-ticker").start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop()


def _node_json(node: FakeNode) -> dict[str, Any]:
    return {**node.body, "name": node.name, "state": node.state}


def _queued_json(queued: FakeQueuedResource) -> dict[str, Any]:
    return {**queued.body, "name": queued.name, "state": {"state": queued.state}}


def _query(raw: str) -> dict[str, list[str]]:
    # The client sends "$alt=json;enum-encoding=int": ";" is no separator for parse_qs.
    return parse_qs(raw, keep_blank_values=True)


def _required(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name)
    if not values or not values[0]:
        raise ApiError(400, "INVALID_ARGUMENT", f"query parameter {name} is required")
    return values[0]


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(scope="session", name="tpu_api_server")
def tpu_api_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeTpuApi]:
    """The fake TPU API for the session; ``authorized_keys`` is set by the sshd fixture when used."""
    api = FakeTpuApi(authorized_keys=tmp_path_factory.mktemp("tpu-api") / "authorized_keys").start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(name="tpu_api")
def tpu_api_fixture(tpu_api_server: FakeTpuApi) -> Iterator[FakeTpuApi]:
    """The session's fake TPU API with no node and no fault."""
    tpu_api_server.reset()
    yield tpu_api_server
    with contextlib.suppress(Exception):
        tpu_api_server.reset()
