"""A fake Kubernetes API server for the pods of one test, replaying a recorded conversation.

There is no API server package on this machine (PEERS.md), so the real ``kubernetes`` client and
dagster-k8s's ``PipesK8sClient`` talk, through a kubeconfig pointing at ``http://127.0.0.1:<port>``,
to this loopback server. It answers in Kubernetes' own shapes, from ``data/k8s_api``:

- ``POST /api/v1/namespaces/{ns}/pods`` -> 201, the pod as the API server stores it (``pod.json``:
  uid, resourceVersion, the spec defaults it adds) over the request's metadata and spec;
- ``GET .../pods/{name}`` and ``GET .../pods?fieldSelector=metadata.name={name}`` -> the pod with the
  scenario's next recorded status (``statuses.json``; the last one repeats), a ``PodList`` for the
  list; ``$IMAGE`` in a status is the pod's image, and a scheduled pod gets the scenario's node;
- ``GET .../pods/{name}/log`` -> the recorded log (``logs/``, what the real entry script prints in a
  pod, see ``record_logs.py``), with or without ``timestamps``, ``tailLines`` honoured, streamed
  when ``follow``; a scenario with ``log_follows_until_deleted`` calls ``on_follow`` (a test
  interrupts the run there) and holds the stream open until the pod is deleted;
- ``DELETE .../pods/{name}`` -> 200 with ``deletionTimestamp``; later reads -> 404 ``Status``.
- a scenario with ``by_command`` (a sharded suite's pods) gives each pod the scenario of the first
  rule whose ``contains`` is in its command (``--collect-only``, a shard's test id), a rule with
  ``times`` only to that many pods (a shard's first pod evicted, its re-run served).
- ``GET .../pods?labelSelector=key=value`` -> the live pods with that label.

Every request is kept (``requests``), JSON bodies parsed, so tests assert on what the client sent.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml

from nightly_assets_tests.peers.http_api import FakeHttpServer, Request, Response

DATA = Path(__file__).parents[1] / "data" / "k8s_api"
_POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<log>/log)?)?$")
PLAIN = "text/plain"


@dataclass
class Seen:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None
    body: Any


@dataclass
class _Pod:
    body: dict[str, Any]
    scenario: dict[str, Any]
    reads: int = 0
    deleted: threading.Event = field(default_factory=threading.Event)

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.body["metadata"].get("labels", {})
        return labels


class FakeKubernetesApi:
    """The fake API server; `use(scenario)` picks the recorded conversation of the next pod."""

    def __init__(self) -> None:
        self.template = json.loads((DATA / "pod.json").read_text())
        self.statuses = json.loads((DATA / "statuses.json").read_text())
        self.scenarios = json.loads((DATA / "scenarios.json").read_text())
        self.scenario: dict[str, Any] = self.scenarios["succeeded"]
        self.requests: list[Seen] = []
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.on_follow: Callable[[], None] | None = None
        self.on_create: Callable[[], None] | None = None  # after the pod is stored, before the answer
        self._served: dict[int, int] = {}  # pods given each `by_command` rule so far
        self._lock = threading.Lock()
        self._server = FakeHttpServer(self._respond, "fake-k8s-api")

    @property
    def url(self) -> str:
        return self._server.url

    def stop(self) -> None:
        self._server.stop()

    def use(self, scenario: str) -> None:
        self.scenario = self.scenarios[scenario]
        self._served = {}

    def _scenario_of(self, body: dict[str, Any]) -> dict[str, Any]:
        rules = self.scenario.get("by_command")
        if not rules:
            return self.scenario
        command = json.dumps(body["spec"]["containers"][0].get("command", []))
        for index, rule in enumerate(rules):
            if rule["contains"] in command and self._served.get(index, 0) < rule.get("times", 1 << 30):
                self._served[index] = self._served.get(index, 0) + 1
                scenario: dict[str, Any] = self.scenarios[rule["scenario"]]
                return scenario
        raise AssertionError(f"no rule of the scenario serves a pod whose command is {command}")

    def kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig for this server whose user presents `token` (as a cluster's would)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "ci", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "ci"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- what the client sent -----------------------------------------------------------------

    def created(self) -> list[dict[str, Any]]:
        """The pod bodies the client posted."""
        return [s.body for s in self.requests if s.method == "POST"]

    def calls(self) -> list[str]:
        """`METHOD kind` per request: create, read, list, log, delete."""
        names = []
        for seen in self.requests:
            match = _POD.match(seen.path)
            if match is None:
                names.append(f"{seen.method} {seen.path}")
            elif seen.method == "POST":
                names.append("create")
            elif seen.method == "DELETE":
                names.append("delete")
            elif match["log"]:
                names.append("log")
            else:
                names.append("read" if match["name"] else "list")
        return names

    # -- the API ------------------------------------------------------------------------------

    def _respond(self, request: Request) -> Response:
        query = parse_qs(request.query)
        body = json.loads(request.body) if request.body else None
        with self._lock:
            self.requests.append(
                Seen(request.method, request.path, query, request.headers.get("Authorization"), body)
            )
        match = _POD.match(request.path)
        if match is None:
            return _status(
                404, "NotFound", f"the server could not find the requested resource ({request.path})"
            )
        namespace, name = match["ns"], match["name"]
        if request.method == "POST" and name is None:
            if not isinstance(body, dict):
                return _status(400, "BadRequest", "expected a Pod object as the request body")
            return self._create(namespace, body)
        if request.method == "GET" and name is None:
            selector = query.get("fieldSelector", [""])[0]
            wanted = selector.removeprefix("metadata.name=")
            labels = query.get("labelSelector", [""])[0]
            live = [(key, pod) for key, pod in self.pods.items() if not pod.deleted.is_set()]
            if labels:  # `key=value`, the one form the client sends
                label, _, value = labels.partition("=")
                found = [p for (ns, _), p in live if ns == namespace and p.labels.get(label) == value]
            else:
                found = [p for (ns, n), p in live if ns == namespace and n == wanted]
            items = [self._read(pod) for pod in found]
            return _json(
                200,
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "48213400"},
                    "items": items,
                },
            )
        pod = self.pods.get((namespace, name))
        if pod is None or pod.deleted.is_set():
            return _status(404, "NotFound", f'pods "{name}" not found', name)
        if request.method == "DELETE":
            pod.deleted.set()
            gone = self._shape(pod, pod.body.get("status", {}))
            gone["metadata"].update(deletionTimestamp="2026-11-04T04:25:00Z", deletionGracePeriodSeconds=30)
            return _json(200, gone)
        if match["log"]:
            return self._log(pod, query)
        return _json(200, self._read(pod))

    def _create(self, namespace: str, body: dict[str, Any]) -> Response:
        name = body["metadata"]["name"]
        if (namespace, name) in self.pods:
            return _status(409, "AlreadyExists", f'pods "{name}" already exists', name)
        with self._lock:  # shards' pods are created at once
            pod = _Pod(body, self._scenario_of(body))
            self.pods[(namespace, name)] = pod
        if self.on_create is not None:
            self.on_create()
        created = self._shape(pod, self.statuses["created"])
        created["metadata"]["namespace"] = namespace
        return _json(201, created)

    def _read(self, pod: _Pod) -> dict[str, Any]:
        reads = pod.scenario["reads"]
        state = reads[min(pod.reads, len(reads) - 1)]
        pod.reads += 1
        return self._shape(pod, self.statuses[state])

    def _shape(self, pod: _Pod, status: dict[str, Any]) -> dict[str, Any]:
        """The stored pod: the template's server-side fields over the request, with `status`."""
        image = pod.body["spec"]["containers"][0].get("image", "")
        text = json.dumps(status).replace("$IMAGE_ID", f"{image.split(':')[0]}@sha256:{'5e' * 32}")
        text = text.replace("$IMAGE", image)
        shaped = copy.deepcopy(self.template)
        shaped["metadata"].update(copy.deepcopy(pod.body["metadata"]))
        shaped["spec"] = {**shaped["spec"], **copy.deepcopy(pod.body["spec"])}
        scheduled = any(
            c["type"] == "PodScheduled" and c["status"] == "True" for c in status.get("conditions", [])
        )
        if scheduled and pod.scenario.get("node"):
            shaped["spec"]["nodeName"] = pod.scenario["node"]
        shaped["status"] = json.loads(text)
        return shaped

    def _log(self, pod: _Pod, query: dict[str, list[str]]) -> Response:
        recorded = pod.scenario.get("log")
        lines = (DATA / "logs" / recorded).read_text().splitlines() if recorded else []
        if not _flag(query, "timestamps"):
            lines = [line.partition(" ")[2] for line in lines]
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"][0]) :]
        text = "".join(f"{line}\n" for line in lines).encode()
        if not _flag(query, "follow"):
            return Response(200, text, content_type=PLAIN)
        return Response(200, content_type=PLAIN, chunks=self._follow(pod, text))

    def _follow(self, pod: _Pod, text: bytes) -> Iterator[bytes]:
        yield text
        if pod.scenario.get("log_follows_until_deleted"):
            if self.on_follow is not None:
                self.on_follow()
            pod.deleted.wait(timeout=30)


def _flag(query: dict[str, list[str]], name: str) -> bool:
    """A boolean query parameter as the API server parses it (Go's ParseBool: the client sends True)."""
    return query.get(name, ["false"])[0] in ("1", "t", "T", "true", "TRUE", "True")


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(status, json.dumps(body).encode())


def _status(code: int, reason: str, message: str, name: str | None = None) -> Response:
    """A `Status` object, as the API server answers errors."""
    details = {"name": name, "kind": "pods"} if name else {}
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }
    return _json(code, body)


@pytest.fixture(name="k8s_api")
def k8s_api_fixture() -> Iterator[FakeKubernetesApi]:
    """A fresh fake API server per test (its pods and requests are the test's own)."""
    api = FakeKubernetesApi()
    try:
        yield api
    finally:
        api.stop()
