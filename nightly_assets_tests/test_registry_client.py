"""The OCI registry client's errors and retries: the errors name the registry and what to fix,
never a secret; the retries (urllib3's `Retry` on the session) are watched from a real loopback
HTTP server that logs when each request came."""

from __future__ import annotations

import hashlib
import itertools
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from nightly_assets.containers.registry import OciRegistry, RegistryError
from nightly_assets.containers.resources import ContainerRegistriesResource, RegistryEndpoint
from nightly_assets_tests.peers.ecr_api import FakeEcrApi


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    at: float  # time.monotonic() when the request had arrived
    status: int


@dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    statuses: list[int]
    retry_after: str | None


@dataclass
class ScriptedRegistry:
    """Just enough of the distribution API (`/v2/`, monolithic blob uploads, checked against their
    digest) on loopback, answering scripted statuses first; `log` holds every request."""

    log: list[Seen] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    _faults: list[_Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, method: str, path_regex: str, statuses: list[int], retry_after: str | None = None) -> None:
        self._faults.append(_Fault(method, re.compile(path_regex), list(statuses), retry_after))

    def seen(self, method: str) -> list[Seen]:
        return [s for s in self.log if s.method == method]

    def answer(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, str]]:
        split = urlsplit(target)
        with self._lock:
            at = time.monotonic()
            fault = next(
                (
                    f
                    for f in self._faults
                    if f.method == method and f.path.fullmatch(split.path) and f.statuses
                ),
                None,
            )
            if fault:
                status = fault.statuses.pop(0)
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            else:
                status, headers = self._distribution(method, split.path, split.query, body)
            self.log.append(Seen(method, split.path, at, status))
        return status, headers

    def _distribution(self, method: str, path: str, query: str, body: bytes) -> tuple[int, dict[str, str]]:
        if method == "GET" and path == "/v2/":
            return 200, {}
        if method == "POST" and (start := re.fullmatch(r"/v2/(.+)/blobs/uploads/", path)):
            return 202, {"Location": f"/v2/{start.group(1)}/blobs/uploads/{len(self.log)}?_state=s3cr3t"}
        if method == "PUT" and re.fullmatch(r"/v2/.+/blobs/uploads/\d+", path):
            digest = parse_qs(query).get("digest", [""])[0]
            if digest != "sha256:" + hashlib.sha256(body).hexdigest():
                return 400, {}
            self.blobs[digest] = body
            return 201, {"Docker-Content-Digest": digest}
        return 404, {}


@pytest.fixture
def scripted() -> Iterator[tuple[ScriptedRegistry, str]]:
    """A ScriptedRegistry and its http:// URL."""
    registry = ScriptedRegistry()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            status, headers = registry.answer(self.command, self.path, self._body())
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return body

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True, name="scripted-registry").start()
    yield registry, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def dropping() -> Iterator[tuple[list[float], str]]:
    """A loopback port that reads each request and hangs up without an answer; the times it accepted."""
    accepted: list[float] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(time.monotonic())
            with conn:
                request = b""
                while b"\r\n\r\n" not in request and (chunk := conn.recv(4096)):
                    request += chunk

    threading.Thread(target=serve, daemon=True, name="dropping-registry").start()
    yield accepted, f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def _gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def test_an_unreachable_registry_is_named_after_its_retries():
    registry = OciRegistry("ecr", "https://127.0.0.1:9", retries=2, backoff_s=0.1)
    started = time.monotonic()
    with pytest.raises(RegistryError, match=r"ecr: GET https://127.0.0.1:9/v2/: registry unreachable"):
        registry.ping()
    assert 0.1 + 0.2 <= time.monotonic() - started < 5  # it waited between its 3 attempts


def test_a_dropped_connection_is_retried_with_exponential_backoff(dropping):
    accepted, url = dropping
    registry = OciRegistry("ecr", url, retries=2, backoff_s=0.2)
    with pytest.raises(RegistryError, match=rf"ecr: GET {url}/v2/: registry unreachable at {url}"):
        registry.ping()
    assert len(accepted) == 3  # the first attempt and 2 retries
    first, second = _gaps(accepted)
    assert first >= 0.2  # backoff_s before the first retry
    assert second >= 0.4  # twice as long before the next
    assert second < 5


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_a_busy_or_failing_registry_is_asked_again(scripted, status):
    server, url = scripted
    server.fail("GET", "/v2/", [status, status])
    OciRegistry("ecr", url, retries=2, backoff_s=0.01).ping()
    assert [s.status for s in server.log] == [status, status, 200]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(scripted, status):
    server, url = scripted
    server.fail("GET", "/v2/", [status], retry_after="1")
    server.fail("GET", "/v2/", [status])  # the next time without: backoff_s
    OciRegistry("ecr", url, retries=2, backoff_s=0.01).ping()
    assert [s.status for s in server.log] == [status, status, 200]
    after_retry_after, after_backoff = _gaps([s.at for s in server.log])
    assert after_retry_after >= 1.0  # the registry's 1 s, not backoff_s (0.01 s)
    assert after_backoff < 1.0


def test_retries_run_out_into_the_registrys_last_answer(scripted):
    server, url = scripted
    server.fail("GET", "/v2/", [503] * 10)
    with pytest.raises(RegistryError, match=rf"ecr: GET {url}/v2/: HTTP 503 \(expected \(200,\)\)"):
        OciRegistry("ecr", url, retries=2, backoff_s=0.01).ping()
    assert len(server.log) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_an_answer_not_worth_repeating_is_not_repeated(scripted, status):
    server, url = scripted
    server.fail("GET", "/v2/", [status])
    with pytest.raises(RegistryError, match=rf"ecr: GET {url}/v2/: (HTTP )?{status}"):
        OciRegistry("ecr", url, retries=2, backoff_s=0.01).ping()
    assert len(server.log) == 1


def test_a_failed_blob_put_is_not_resent_but_the_upload_starts_over(scripted):
    server, url = scripted
    blob = b"layer bytes" * 1000
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    server.fail("POST", r"/v2/.+/blobs/uploads/", [500])  # starting an upload: retried as it is
    server.fail("PUT", r"/v2/.+/blobs/uploads/.+", [429], retry_after="1")
    server.fail("PUT", r"/v2/.+/blobs/uploads/.+", [502])
    opened: list[int] = []

    def open_stream() -> Iterator[bytes]:  # reads once, like a blob streamed from another registry
        opened.append(1)
        yield from (blob[i : i + 4096] for i in range(0, len(blob), 4096))

    OciRegistry("acr", url, retries=3, backoff_s=0.01).upload_blob("sample", digest, open_stream)
    assert [(s.method, s.status) for s in server.log] == [
        ("POST", 500),
        ("POST", 202),
        ("PUT", 429),
        ("POST", 202),  # a new upload, with the stream opened again: the PUT is never resent
        ("PUT", 502),
        ("POST", 202),
        ("PUT", 201),
    ]
    assert len(opened) == 3
    assert server.blobs == {digest: blob}
    assert server.log[3].at - server.log[2].at >= 1.0  # the 429's Retry-After


def test_an_upload_that_keeps_failing_is_named(scripted):
    server, url = scripted
    digest = "sha256:" + hashlib.sha256(b"x").hexdigest()
    server.fail("PUT", r"/v2/.+/blobs/uploads/.+", [500] * 10)
    registry = OciRegistry("acr", url, retries=2, backoff_s=0.01)
    with pytest.raises(RegistryError, match=rf"acr: upload of blob {digest} to sample kept failing"):
        registry.upload_blob("sample", digest, lambda: iter([b"x"]))
    assert [s.status for s in server.seen("PUT")] == [500, 500, 500]
    assert len(server.seen("POST")) == 3


def test_an_unconfigured_role_says_which_variable_to_set():
    with pytest.raises(RegistryError, match=r"role 'acr' is not configured.*NIGHTLY_REGISTRY_ACR_URL"):
        ContainerRegistriesResource().registry("acr")


def test_a_missing_password_variable_is_named(monkeypatch):
    monkeypatch.delenv("NIGHTLY_TEST_NO_SUCH_PASSWORD", raising=False)
    endpoint = RegistryEndpoint(
        url="https://r.example", username="u", password_env="NIGHTLY_TEST_NO_SUCH_PASSWORD"
    )
    with pytest.raises(RegistryError, match="NIGHTLY_TEST_NO_SUCH_PASSWORD is not set"):
        ContainerRegistriesResource(registries={"ecr": endpoint}).registry("ecr")


@pytest.mark.registry
def test_wrong_credentials_get_a_clear_401_without_the_password(registries):
    ecr = registries["ecr"]
    wrong = OciRegistry("ecr", ecr.url, ecr.username, "not-the-password-1234", verify=str(ecr.ca_cert))
    with pytest.raises(RegistryError) as caught:
        wrong.ping()
    assert "401 unauthorized: check the credentials for the 'ecr' registry" in str(caught.value)
    assert "not-the-password-1234" not in str(caught.value)
    right = OciRegistry("ecr", ecr.url, ecr.username, ecr.password, verify=str(ecr.ca_cert))
    right.ping()
    assert right.tags("never/pushed") == []


@pytest.fixture
def ecr_api(registries):
    """The fake ECR API handing out the real ECR-role registry's credentials as its token."""
    ecr = registries["ecr"]
    api = FakeEcrApi(ecr.username, ecr.password, ecr.url).start()
    yield api
    api.stop()


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """boto3's credential chain sees only what a test sets: no profile files, no instance metadata."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def _ecr_by_token(registries, api: FakeEcrApi) -> ContainerRegistriesResource:
    ecr = registries["ecr"]
    endpoint = RegistryEndpoint(
        url=ecr.url, ca_cert=str(ecr.ca_cert), auth="ecr", aws_region="us-east-1", aws_endpoint_url=api.url
    )
    return ContainerRegistriesResource(registries={"ecr": endpoint})


@pytest.mark.registry
def test_ecr_token_flow_signs_in_to_the_real_registry_and_caches_the_token(registries, ecr_api, aws_env):
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIATESTNIGHTLY")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key")
    resource = _ecr_by_token(registries, ecr_api)
    registry = resource.registry("ecr")
    registry.ping()
    assert registry.tags("never/pushed") == []
    auth = resource.engine_auth("ecr")
    assert auth is not None and auth["username"] == registries["ecr"].username
    assert auth["serveraddress"] == registry.host
    assert ecr_api.calls == ["AKIATESTNIGHTLY"]  # signed with the chain's key, fetched once, cached


@pytest.mark.registry
def test_ecr_access_denied_is_named(registries, ecr_api, aws_env):
    aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIADENIED")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key")
    ecr_api.deny = True
    with pytest.raises(RegistryError, match=r"role 'ecr': ECR in us-east-1 .*AccessDeniedException"):
        _ecr_by_token(registries, ecr_api).registry("ecr")


@pytest.mark.registry
def test_ecr_without_aws_credentials_says_what_to_set(registries, ecr_api, aws_env):
    with pytest.raises(RegistryError, match="no AWS credentials"):
        _ecr_by_token(registries, ecr_api).registry("ecr")
    assert ecr_api.calls == []
