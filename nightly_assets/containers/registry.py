"""OCI distribution API client: manifests, blobs, tags (whole images copied and expired on top of
it: registry_images.py).

Speaks HTTP to a registry (Docker distribution, ECR, ACR) with basic credentials, following a
Bearer token challenge when the registry answers with one (ACR, Docker Hub style). Retries
unreachable registries, 5xx and 429 with exponential backoff (honouring Retry-After) through
urllib3's `Retry` on the session's adapter. A tag is only ever written after every blob its
manifest names is confirmed present in the destination (``registry_images.copy_image``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3 import BaseHTTPResponse
from urllib3.exceptions import MaxRetryError
from urllib3.util import Retry

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = MANIFEST_TYPES[0], MANIFEST_TYPES[2]
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Every verb `_call` sends with retry=True: reads, the POST that opens an upload session (a
# repeat only opens another), manifest PUTs with a body in memory and DELETE. The one request
# never retried as is, the PUT of a streamed blob (a stream reads once), goes through the session
# without retries; `upload_blob` starts that upload over instead.
RETRY_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE"})
MAX_DELAY_S = 60.0  # the longest wait between two attempts, Retry-After included
CHUNK = 1 << 20


class RegistryError(RuntimeError):
    """A registry call failed for good; the message names the registry, the call and the answer."""


class RegistryRetry(Retry):
    """urllib3's `Retry` waiting as this client always has.

    `backoff_factor` (the client's `backoff_s`) before the first retry, then twice as long each
    time (urllib3's own formula skips the first wait); a Retry-After of whole seconds (0 too)
    instead, at most `MAX_DELAY_S`; any other Retry-After is ignored rather than an error.
    Only `status_forcelist` decides which answers are retried (not urllib3's Retry-After list).
    """

    RETRY_AFTER_STATUS_CODES: frozenset[int] = frozenset()

    def get_backoff_time(self) -> float:
        # requests follows redirects itself, so the history holds only the failed attempts.
        failures = len(self.history)
        if failures == 0:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (failures - 1)))

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        value = response.headers.get("Retry-After", "")
        return min(float(value), MAX_DELAY_S) if re.fullmatch(r"[0-9]+", value) else None

    def sleep_for_retry(self, response: BaseHTTPResponse) -> bool:
        delay = self.get_retry_after(response)
        if delay is None:
            return False
        time.sleep(delay)
        return True


@dataclass(frozen=True)
class Manifest:
    body: bytes
    media_type: str
    digest: str

    def document(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.body)
        return result

    def blob_digests(self) -> list[str]:
        """Config and layer digests of an image manifest (empty for an index)."""
        doc = self.document()
        if self.media_type in INDEX_TYPES:
            return []
        return [doc["config"]["digest"], *(layer["digest"] for layer in doc.get("layers", []))]

    def child_digests(self) -> list[str]:
        """Platform manifests of an index (empty for an image manifest)."""
        if self.media_type not in INDEX_TYPES:
            return []
        return [m["digest"] for m in self.document().get("manifests", [])]


@dataclass
class OciRegistry:
    """One registry endpoint. `name` is its role (ecr, acr) and appears in every error message."""

    name: str
    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    verify: bool | str = True  # True, False or a CA bundle path
    timeout_s: float = 60.0
    retries: int = 5
    backoff_s: float = 0.5
    _session: requests.Session = field(init=False, repr=False)  # retries per `retry_policy()`
    _once: requests.Session = field(init=False, repr=False)  # no retries (retry=False)
    _token: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._session = _session(self.retry_policy())
        self._once = _session(Retry(0, read=False))  # what a plain requests.Session does

    def retry_policy(self) -> RegistryRetry:
        """Up to `retries` retries of an unreachable registry, a dropped connection or a
        RETRY_STATUSES answer; the last answer is returned, not raised, for `_call` to judge."""
        return RegistryRetry(
            total=self.retries,
            connect=self.retries,
            read=self.retries,
            status=self.retries,
            allowed_methods=RETRY_METHODS,
            status_forcelist=RETRY_STATUSES,
            backoff_factor=self.backoff_s,
            backoff_max=MAX_DELAY_S,
            respect_retry_after_header=True,
            raise_on_status=False,
        )

    @property
    def host(self) -> str:
        return registry_host(self.url)

    # -- reading -----------------------------------------------------------------------------

    def ping(self) -> None:
        """Raise RegistryError unless the registry answers /v2/ and accepts the credentials."""
        self._call("GET", "/v2/", ok=(200,))

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        resp = self._call("HEAD", f"/v2/{repo}/manifests/{ref}", ok=(200, 404), headers=_accept())
        return None if resp.status_code == 404 else resp.headers["Docker-Content-Digest"]

    def get_manifest(self, repo: str, ref: str) -> Manifest:
        resp = self._call("GET", f"/v2/{repo}/manifests/{ref}", ok=(200,), headers=_accept())
        media_type = resp.headers.get("Content-Type", "").split(";")[0]
        digest = resp.headers.get("Docker-Content-Digest") or _sha256(resp.content)
        return Manifest(resp.content, media_type, digest)

    def blob_exists(self, repo: str, digest: str) -> bool:
        return self._call("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404)).status_code == 200

    def read_blob(self, repo: str, digest: str) -> bytes:
        return self._call("GET", f"/v2/{repo}/blobs/{digest}", ok=(200,)).content

    def stream_blob(self, repo: str, digest: str) -> Iterator[bytes]:
        resp = self._call("GET", f"/v2/{repo}/blobs/{digest}", ok=(200,), stream=True)
        try:
            yield from resp.iter_content(CHUNK)
        finally:
            resp.close()

    def tags(self, repo: str) -> list[str]:
        found: list[str] = []
        path: str | None = f"/v2/{repo}/tags/list?n=1000"
        while path:
            resp = self._call("GET", path, ok=(200, 404))
            if resp.status_code == 404:
                return []
            found.extend(resp.json().get("tags") or [])
            match = re.search(r"<([^>]+)>", resp.headers.get("Link", ""))
            path = match.group(1) if match else None
        return sorted(found)

    def image_config(self, repo: str, ref: str) -> dict[str, Any]:
        """The image's config document (labels, created time); the first platform's for an index."""
        manifest = self.get_manifest(repo, ref)
        if manifest.media_type in INDEX_TYPES:
            manifest = self.get_manifest(repo, manifest.child_digests()[0])
        config: dict[str, Any] = json.loads(self.read_blob(repo, manifest.document()["config"]["digest"]))
        return config

    def missing_blobs(self, repo: str, ref: str) -> list[str]:
        """Blobs the manifest at `ref` names that the registry does not have (recurses into indexes)."""
        manifest = self.get_manifest(repo, ref)
        missing = [d for d in manifest.blob_digests() if not self.blob_exists(repo, d)]
        for child in manifest.child_digests():
            missing.extend(self.missing_blobs(repo, child))
        return missing

    # -- writing -----------------------------------------------------------------------------

    def upload_blob(self, repo: str, digest: str, open_stream: Callable[[], Iterable[bytes]]) -> None:
        """Monolithic upload; a retry starts a new upload and calls `open_stream` again (a stream
        reads once, so urllib3 cannot resend it): the same `retry_policy()` counts and waits."""
        policy = self.retry_policy()
        while True:
            start = self._call("POST", f"/v2/{repo}/blobs/uploads/", ok=(202,))
            location = start.headers["Location"]
            separator = "&" if "?" in location else "?"
            resp = self._call(
                "PUT",
                f"{location}{separator}digest={digest}",
                ok=(201, *RETRY_STATUSES),
                data=open_stream(),
                headers={"Content-Type": "application/octet-stream"},
                retry=False,
            )
            if resp.status_code == 201:
                return
            try:
                policy = policy.increment("PUT", _redact(resp.url), response=resp.raw)
            except MaxRetryError:
                raise RegistryError(f"{self.name}: upload of blob {digest} to {repo} kept failing") from None
            policy.sleep(resp.raw)

    def put_manifest(self, repo: str, ref: str, manifest: Manifest) -> str:
        resp = self._call(
            "PUT",
            f"/v2/{repo}/manifests/{ref}",
            ok=(201,),
            data=manifest.body,
            headers={"Content-Type": manifest.media_type},
        )
        return resp.headers.get("Docker-Content-Digest", manifest.digest)

    def delete_manifest(self, repo: str, digest: str) -> None:
        self._call("DELETE", f"/v2/{repo}/manifests/{digest}", ok=(202, 404))

    # -- HTTP --------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...],
        retry: bool = True,
        **kwargs: Any,
    ) -> requests.Response:
        url = path if path.startswith("http") else f"{self.url.rstrip('/')}{path}"
        what = f"{self.name}: {method} {_redact(url)}"
        try:  # the session's Retry has already retried what is worth retrying
            resp = self._send(self._session if retry else self._once, method, url, **kwargs)
        except requests.RequestException as exc:
            raise RegistryError(f"{what}: registry unreachable at {self.url}: {_redact(str(exc))}") from exc
        if resp.status_code in ok:
            return resp
        if resp.status_code == 401:
            raise RegistryError(
                f"{what}: 401 unauthorized: check the credentials for the '{self.name}' registry"
            )
        raise RegistryError(f"{what}: HTTP {resp.status_code} (expected {ok}): {resp.text[:300]}")

    def _send(self, session: requests.Session, method: str, url: str, **kwargs: Any) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}) or {})

        def send() -> requests.Response:  # _auth() changes once a token is fetched
            return session.request(
                method,
                url,
                headers={**self._auth(), **headers},
                verify=self.verify,
                timeout=self.timeout_s,
                **kwargs,
            )

        resp = send()
        challenge = resp.headers.get("WWW-Authenticate", "")
        if resp.status_code == 401 and challenge.lower().startswith("bearer") and self._token is None:
            self._token = self._fetch_token(challenge)
            resp = send()
        return resp

    def _auth(self) -> dict[str, str]:
        if self._token:
            return {"Authorization": f"Bearer {self._token}"}
        if self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def _fetch_token(self, challenge: str) -> str:
        """Docker token auth: trade the basic credentials for a bearer token at the realm."""
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if realm is None:
            raise RegistryError(f"{self.name}: bearer challenge without a realm: {challenge!r}")
        auth = (self.username, self.password or "") if self.username is not None else None
        resp = self._session.get(realm, params=params, auth=auth, verify=self.verify, timeout=self.timeout_s)
        if resp.status_code != 200:
            raise RegistryError(f"{self.name}: token endpoint {realm} answered HTTP {resp.status_code}")
        body = resp.json()
        token: str = body.get("token") or body.get("access_token") or ""
        if not token:
            raise RegistryError(f"{self.name}: token endpoint {realm} returned no token")
        return token


def _session(policy: Retry) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=policy)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _accept() -> dict[str, str]:
    return {"Accept": ", ".join(MANIFEST_TYPES)}


def _sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _redact(text: str) -> str:
    """Strip userinfo from URLs and any upload state token from query strings."""
    text = re.sub(r"//[^/@\s]+@", "//***@", text)
    return re.sub(r"(_state=)[^&\s]+", r"\1***", text)


def registry_host(url: str) -> str:
    """`host[:port]` of a registry URL, as image references name it."""
    return re.sub(r"^https?://", "", url).rstrip("/")
