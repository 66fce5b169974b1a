"""The OCI registry peers: two Docker distribution registries (the ECR and ACR roles), both on
127.0.0.1 over TLS (one self-signed certificate per session) with htpasswd (bcrypt) basic auth,
and ``FaultyProxy``, an HTTPS reverse proxy that injects error statuses in front of one of them.

The registries are Debian's ``docker-registry`` (distribution 2.8) with storage in a per-session
temporary directory. Load with ``pytest_plugins = ["nightly_assets_tests.peers.registry"]``.

The Docker engine treats 127.0.0.0/8 as an insecure registry range, so it talks TLS to these
registries without verifying the certificate; HTTP clients in tests pass ``verify=ca_cert``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime
import http.client
import importlib
import ipaddress
import json
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from nightly_assets_tests.peers.process import free_port, stop_process

REGISTRY_BINARY = "docker-registry"
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
BCRYPT_COST = 5  # the registry checks the password on every request: keep it cheap in tests
CHUNK = 256 * 1024
UPSTREAM_TIMEOUT_S = 300.0
CLIENT_IDLE_TIMEOUT_S = 120.0


# -- TLS and passwords ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """A self-signed certificate for 127.0.0.1 and localhost (it is its own CA) and its key."""

    cert: Path
    key: Path


def make_self_signed_cert(directory: Path, common_name: str = "nightly-peers") -> TlsFiles:
    """Write ``cert.pem`` / ``key.pem`` (P-256, 30 days, SAN IP:127.0.0.1 and DNS:localhost)."""
    directory.mkdir(parents=True, exist_ok=True)
    tls = TlsFiles(cert=directory / "cert.pem", key=directory / "key.pem")
    try:
        importlib.import_module("cryptography")
    except ImportError:
        _self_signed_with_openssl(tls, common_name)
    else:
        _self_signed_with_cryptography(tls, common_name)
    tls.key.chmod(0o600)
    return tls


def _self_signed_with_cryptography(tls: TlsFiles, common_name: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    public_key = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(LOOPBACK)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public_key), critical=False)
        .sign(key, hashes.SHA256())
    )
    tls.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _self_signed_with_openssl(tls: TlsFiles, common_name: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("neither the `cryptography` package nor `openssl` is available to make a TLS cert")
    argv = [
        openssl,
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        str(tls.key),
        "-out",
        str(tls.cert),
        "-days",
        "30",
        "-subj",
        f"/CN={common_name}",
        "-addext",
        f"subjectAltName=IP:{LOOPBACK},DNS:localhost",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyCertSign",
        "-addext",
        "extendedKeyUsage=serverAuth",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"openssl could not make a self-signed certificate: {result.stderr.strip()}")


def bcrypt_hash(password: str, cost: int = BCRYPT_COST) -> str:
    """A bcrypt hash for an htpasswd file: the ``bcrypt`` package if installed, else libxcrypt."""
    try:
        bcrypt = importlib.import_module("bcrypt")
    except ImportError:
        return _bcrypt_with_libcrypt(password, cost)
    return cast(bytes, bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost))).decode()


def _bcrypt_with_libcrypt(password: str, cost: int) -> str:
    """libxcrypt (Debian's libcrypt1, always installed) knows ``$2b$``; glibc's old crypt did not."""
    library = ctypes.util.find_library("crypt") or "libcrypt.so.1"
    try:
        libcrypt = ctypes.CDLL(library)
        gensalt = libcrypt.crypt_gensalt
        crypt = libcrypt.crypt
    except (OSError, AttributeError):
        pytest.fail(f"no bcrypt: `pip install bcrypt` or install libxcrypt ({library} is unusable)")
    gensalt.restype = ctypes.c_char_p
    gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    crypt.restype = ctypes.c_char_p
    crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    setting = gensalt(b"$2b$", cost, None, 0)
    hashed = crypt(password.encode(), setting) if setting else None
    if not hashed or not hashed.startswith(b"$2b$"):
        pytest.fail(f"{library} cannot make bcrypt hashes: `pip install bcrypt`")
    return cast(bytes, hashed).decode()


# -- registries ----------------------------------------------------------------------------------


@dataclass
class Registry:
    """A running ``docker-registry``: TLS on ``host``, basic auth with ``username``/``password``."""

    name: str
    host: str
    url: str
    username: str
    password: str = field(repr=False)
    ca_cert: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    root: Path
    log_path: Path

    @property
    def auth(self) -> tuple[str, str]:
        """``(username, password)`` for ``requests``."""
        return (self.username, self.password)

    @property
    def auth_config(self) -> dict[str, str]:
        """``auth_config`` for the Docker SDK's ``images.push`` / ``images.pull``."""
        return {"username": self.username, "password": self.password, "serveraddress": self.host}

    def role_env(self, namespace: str | None = None) -> dict[str, str]:
        """The ``NIGHTLY_REGISTRY_<ROLE>_*`` variables that make this registry the role it is named
        after (``ecr``, ``acr``) for the containers resource, optionally under ``namespace``."""
        env = {
            "URL": self.url,
            "USERNAME": self.username,
            "PASSWORD": self.password,
            "CA_CERT": str(self.ca_cert),
        }
        if namespace is not None:
            env["NAMESPACE"] = namespace
        return {f"NIGHTLY_REGISTRY_{self.name.upper()}_{name}": value for name, value in env.items()}

    def repository(self, name: str) -> str:
        """``127.0.0.1:PORT/name``: what to tag an image with to push it here."""
        return f"{self.host}/{name}"

    def session(self, authenticated: bool = True) -> requests.Session:
        """A ``requests`` session that trusts ``ca_cert`` (and logs in unless told not to)."""
        return tls_session(self.ca_cert, self.auth if authenticated else None)

    def stop(self) -> None:
        _terminate(self.process)


@dataclass
class Registries:
    """The session's registries: ``ecr`` and ``acr`` (different credentials, same certificate)."""

    ecr: Registry
    acr: Registry

    def __getitem__(self, name: str) -> Registry:
        registry = getattr(self, name, None)
        if not isinstance(registry, Registry):
            raise KeyError(name)
        return registry

    def __iter__(self) -> Iterator[Registry]:
        return iter((self.ecr, self.acr))


def tls_session(ca_cert: Path, auth: tuple[str, str] | None = None) -> requests.Session:
    """A session that verifies against ``ca_cert`` and ignores the environment: with
    ``trust_env`` on, ``REQUESTS_CA_BUNDLE`` silently overrides ``session.verify`` and
    ``HTTPS_PROXY`` could send loopback traffic elsewhere."""
    session = requests.Session()
    session.trust_env = False
    session.verify = str(ca_cert)
    session.auth = auth
    return session


def _terminate(process: subprocess.Popen[bytes]) -> None:
    stop_process(process, STOP_TIMEOUT_S)


def _registry_config(
    root: Path, name: str, port: int, cert: Path, key: Path, htpasswd: Path
) -> dict[str, Any]:
    return {
        "version": 0.1,
        "log": {"level": "info", "fields": {"service": "registry", "peer": name}},
        "storage": {
            "filesystem": {"rootdirectory": str(root / "data")},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {
            "addr": f"{LOOPBACK}:{port}",
            "secret": secrets.token_hex(16),
            "tls": {"certificate": str(cert), "key": str(key)},
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
        "auth": {"htpasswd": {"realm": f"nightly-{name}", "path": str(htpasswd)}},
    }


def start_registry(
    root: Path,
    name: str,
    username: str,
    password: str,
    cert: Path,
    key: Path,
    port: int | None = None,
) -> Registry:
    """Start ``docker-registry serve`` for ``name`` under ``root/name``; wait for ``/v2/`` to say 401."""
    binary = shutil.which(REGISTRY_BINARY)
    if binary is None:
        pytest.fail(
            f"`{REGISTRY_BINARY}` is not installed: run `apt-get install docker-registry` "
            "(or deselect with -m 'not registry')"
        )
    home = root / name
    home.mkdir(parents=True, exist_ok=True)
    htpasswd = home / "htpasswd"
    htpasswd.write_text(f"{username}:{bcrypt_hash(password)}\n")
    htpasswd.chmod(0o600)
    log_path = home / "registry.log"
    attempts = 1 if port is not None else 3
    for attempt in range(attempts):
        chosen = port if port is not None else free_port()
        config = home / "config.yml"
        config.write_text(yaml.safe_dump(_registry_config(home, name, chosen, cert, key, htpasswd)))
        config.chmod(0o600)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [binary, "serve", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        registry = Registry(
            name=name,
            host=f"{LOOPBACK}:{chosen}",
            url=f"https://{LOOPBACK}:{chosen}",
            username=username,
            password=password,
            ca_cert=cert,
            process=process,
            root=home,
            log_path=log_path,
        )
        if _wait_for_registry(registry):
            return registry
        _terminate(process)
        if attempt + 1 < attempts and "address already in use" in _tail(log_path):
            continue
        break
    pytest.fail(
        f"registry {name} did not answer 401 on {registry.url}/v2/ within {START_TIMEOUT_S:.0f} s; "
        f"last lines of {log_path}:\n{_tail(log_path)}"
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_for_registry(registry: Registry) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    with registry.session(authenticated=False) as session:
        while time.monotonic() < deadline:
            if registry.process.poll() is not None:
                return False
            with contextlib.suppress(requests.exceptions.RequestException):
                if session.get(f"{registry.url}/v2/", timeout=2).status_code == 401:
                    return True
            time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def registry_tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """The session's self-signed certificate (127.0.0.1, localhost) shared by registries and proxies."""
    return make_self_signed_cert(tmp_path_factory.mktemp("registry-tls"))


@pytest.fixture(scope="session")
def registries(tmp_path_factory: pytest.TempPathFactory, registry_tls: TlsFiles) -> Iterator[Registries]:
    """Two TLS + htpasswd registries, ``ecr`` and ``acr``, with random passwords; stopped at the end."""
    root = tmp_path_factory.mktemp("registries")
    started: list[Registry] = []
    try:
        for name in ("ecr", "acr"):
            started.append(
                start_registry(
                    root,
                    name,
                    username=f"nightly-{name}",
                    password=secrets.token_urlsafe(18),
                    cert=registry_tls.cert,
                    key=registry_tls.key,
                )
            )
        yield Registries(ecr=started[0], acr=started[1])
    finally:
        for registry in started:
            registry.stop()


# -- the faulty proxy ----------------------------------------------------------------------------

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_ERROR_CODES = {401: "UNAUTHORIZED", 403: "DENIED", 404: "NAME_UNKNOWN", 429: "TOOMANYREQUESTS"}


@dataclass(frozen=True)
class ProxiedRequest:
    """One request the proxy answered: ``injected`` when a fault rule answered it."""

    method: str
    path: str
    query: str
    status: int
    injected: bool


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    statuses: list[int]
    retry_after: str | None


class FaultyProxy:
    """A threaded HTTPS reverse proxy in front of ``upstream`` that can answer with injected errors.

    ``fail(method, path_regex, statuses)`` makes the next ``len(statuses)`` requests whose method
    is ``method`` (or any, for ``"*"``) and whose path (without the query) matches ``path_regex``
    in full get those statuses, with a registry-style JSON error body, instead of being
    forwarded. Everything else is forwarded with the client's headers (``Host`` too, so the
    registry builds ``Location`` URLs that point at the proxy) and streamed both ways. Every
    request lands in ``log``.
    """

    def __init__(self, upstream: Registry, tls: TlsFiles) -> None:
        self.upstream = upstream
        self.log: list[ProxiedRequest] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        upstream_split = urlsplit(upstream.url)
        self._upstream_host = upstream_split.hostname or LOOPBACK
        self._upstream_port = upstream_split.port or 443
        self.upstream_context = ssl.create_default_context(cafile=str(upstream.ca_cert))
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(str(tls.cert), str(tls.key))
        self._server = _ProxyServer((LOOPBACK, 0), _ProxyHandler, self, server_context)
        self.port = int(self._server.server_address[1])
        self.host = f"{LOOPBACK}:{self.port}"
        self.url = f"https://{self.host}"
        self.ca_cert = tls.cert
        self._thread: threading.Thread | None = None

    def start(self) -> FaultyProxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"faulty-proxy-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.close_connections()
        self._server.server_close()

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def fail(self, method: str, path_regex: str, statuses: list[int], retry_after: str | None = None) -> None:
        """Answer the next ``len(statuses)`` matching requests with ``statuses``, in order."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_regex), list(statuses), retry_after))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending_faults(self) -> int:
        """How many injected answers are still to come."""
        with self._lock:
            return sum(len(fault.statuses) for fault in self._faults)

    def session(self, auth: tuple[str, str] | None = None) -> requests.Session:
        """A ``requests`` session to the proxy that trusts its certificate (see ``tls_session``)."""
        return tls_session(self.ca_cert, auth)

    def matching(self, method: str = "*", path_regex: str = ".*") -> list[ProxiedRequest]:
        """The logged requests with this method (``"*"``: any) and a path matching ``path_regex``."""
        pattern = re.compile(path_regex)
        with self._lock:
            return [
                entry
                for entry in self.log
                if method in ("*", entry.method) and pattern.fullmatch(entry.path) is not None
            ]

    def _take_fault(self, method: str, path: str) -> tuple[int, str | None] | None:
        with self._lock:
            for fault in self._faults:
                if fault.method not in ("*", method) or fault.pattern.fullmatch(path) is None:
                    continue
                status = fault.statuses.pop(0)
                if not fault.statuses:
                    self._faults.remove(fault)
                return status, fault.retry_after
        return None

    def _record(self, entry: ProxiedRequest) -> None:
        with self._lock:
            self.log.append(entry)

    def rewrite_location(self, value: str) -> str:
        """Absolute upstream URLs (were the registry to emit them) are turned into proxy URLs."""
        for prefix in (self.upstream.url, f"https://{self.upstream.host}"):
            if value.startswith(prefix):
                return self.url + value[len(prefix) :]
        return value


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: Callable[..., BaseHTTPRequestHandler],
        proxy: FaultyProxy,
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(address, handler)
        self.proxy = proxy
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        # The handshake happens in the handler's thread: a slow client never blocks accept().
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-request are normal here: no tracebacks on stderr."""

    def close_connections(self) -> None:
        with self.connections_lock:
            for connection in list(self.connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self.connections.clear()


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = CLIENT_IDLE_TIMEOUT_S
    server: _ProxyServer

    def handle(self) -> None:
        connection = cast(ssl.SSLSocket, self.connection)
        try:
            connection.do_handshake()
        except (OSError, ssl.SSLError):
            return
        with self.server.connections_lock:
            self.server.connections.add(connection)
        try:
            super().handle()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(connection)

    def log_message(self, format: str, *args: Any) -> None:
        """The proxy's ``log`` is the record; nothing goes to stderr."""

    def _proxy(self) -> None:
        fault = self.server.proxy._take_fault(self.command, urlsplit(self.path).path)
        if fault is None:
            self._forward()
            return
        status, retry_after = fault
        self._drain_body()
        self._send_injected(status, retry_after)

    def _log(self, status: int, injected: bool) -> None:
        """Recorded before the body goes out: a client that has read the response finds it logged."""
        split = urlsplit(self.path)
        self.server.proxy._record(ProxiedRequest(self.command, split.path, split.query, status, injected))

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _proxy

    # request bodies

    def _request_chunks(self) -> Iterator[bytes]:
        """The request body, decoded, in pieces of at most CHUNK bytes."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size_line = self.rfile.readline(65537)
                if not size_line:
                    raise ConnectionError("client closed the connection inside a chunked body")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                yield from self._read_exactly(size)
                self.rfile.readline(3)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            yield from self._read_exactly(length)

    def _read_exactly(self, size: int) -> Iterator[bytes]:
        remaining = size
        while remaining > 0:
            data = self.rfile.read(min(remaining, CHUNK))
            if not data:
                raise ConnectionError("client closed the connection inside the body")
            remaining -= len(data)
            yield data

    def _drain_body(self) -> None:
        for _ in self._request_chunks():
            pass

    # responses

    def _send_injected(self, status: int, retry_after: str | None) -> None:
        code = _ERROR_CODES.get(status, "UNAVAILABLE")
        body = json.dumps({"errors": [{"code": code, "message": "injected", "detail": status}]}).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self._log(status, injected=True)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self) -> None:
        proxy = self.server.proxy
        upstream = http.client.HTTPSConnection(
            proxy._upstream_host,
            proxy._upstream_port,
            context=proxy.upstream_context,
            timeout=UPSTREAM_TIMEOUT_S,
        )
        started = False
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() in _HOP_BY_HOP or name.lower() in ("content-length", "expect"):
                    continue
                upstream.putheader(name, value)
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            length = self.headers.get("Content-Length")
            if chunked:
                upstream.putheader("Transfer-Encoding", "chunked")
            elif length is not None:
                upstream.putheader("Content-Length", length)
            upstream.endheaders()
            for piece in self._request_chunks():
                upstream.send(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                upstream.send(b"0\r\n\r\n")
            response = upstream.getresponse()
            started = True
            self._relay(response)
        except (OSError, http.client.HTTPException) as error:
            self.close_connection = True
            if not started:  # else the client got a truncated response: the log has its status
                self._send_gateway_error(error)
        finally:
            upstream.close()

    def _relay(self, response: http.client.HTTPResponse) -> None:
        proxy = self.server.proxy
        has_body = self.command != "HEAD" and response.status >= 200 and response.status not in (204, 304)
        rechunk = has_body and response.getheader("Content-Length") is None
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            lower = name.lower()
            if lower in _HOP_BY_HOP:
                continue
            self.send_header(name, proxy.rewrite_location(value) if lower == "location" else value)
        if rechunk:
            self.send_header("Transfer-Encoding", "chunked")
        self._log(response.status, injected=False)
        self.end_headers()
        if not has_body:
            return
        while piece := response.read(CHUNK):
            self.wfile.write(b"%x\r\n%b\r\n" % (len(piece), piece) if rechunk else piece)
        if rechunk:
            self.wfile.write(b"0\r\n\r\n")

    def _send_gateway_error(self, error: BaseException) -> None:
        message = f"proxy could not reach {self.server.proxy.upstream.url}: {type(error).__name__}"
        body = json.dumps({"errors": [{"code": "UNAVAILABLE", "message": message}]}).encode()
        self._log(502, injected=False)
        with contextlib.suppress(OSError):
            self.send_response_only(502)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)


@pytest.fixture
def faulty_acr(registries: Registries, registry_tls: TlsFiles) -> Iterator[FaultyProxy]:
    """A ``FaultyProxy`` in front of the ``acr`` registry, with no faults until the test adds some."""
    with FaultyProxy(registries.acr, registry_tls) as proxy:
        yield proxy
