"""The container peers work for real: the Docker engine, the offline base image, the TLS + htpasswd
registries and the fault-injecting proxy in front of one of them."""

from __future__ import annotations

import hashlib
import io
import secrets
from collections.abc import Iterator
from typing import Any

import docker  # type: ignore[import-untyped]
import pytest

from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.peers.registry import FaultyProxy, ProxiedRequest, Registries, Registry


def _push(client: docker.DockerClient, repository: str, tag: str, registry: Registry) -> list[dict[str, Any]]:
    events = list(
        client.images.push(repository, tag, auth_config=registry.auth_config, stream=True, decode=True)
    )
    errors = [event for event in events if "error" in event or "errorDetail" in event]
    assert not errors, errors
    return events


@pytest.fixture(scope="module")
def tiny_image(docker_engine: DockerEngine, base_image: str) -> Iterator[str]:
    """A one-step image ``FROM`` the base image, built with the legacy builder."""
    tag = f"nightly-test/tiny:{secrets.token_hex(4)}"
    dockerfile = f"FROM {base_image}\nRUN echo nightly-tiny > /tiny.txt\n"
    client = docker_engine.client()
    try:
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, pull=False)
        yield tag
        client.images.remove(tag, force=True)
    finally:
        client.close()


@pytest.mark.docker
def test_base_image_runs_python_with_pytest_offline(docker_engine: DockerEngine, base_image: str) -> None:
    client = docker_engine.client()
    try:
        output = client.containers.run(
            base_image,
            ["python3", "-c", "import pytest, venv, sys; print(pytest.__version__, sys.version_info[:2])"],
            network_mode="none",
            remove=True,
        )
        assert b"(3, 11)" in output
        image = client.images.get(base_image)
        assert image.attrs["Config"]["Cmd"] == ["python3"]
        assert any(env.startswith("PATH=") for env in image.attrs["Config"]["Env"])
    finally:
        client.close()


@pytest.mark.docker
@pytest.mark.registry
def test_push_to_tls_registry_with_auth(
    docker_engine: DockerEngine, tiny_image: str, registries: Registries
) -> None:
    ecr = registries.ecr
    repository, tag = ecr.repository("nightly/tiny"), "t1"
    client = docker_engine.client()
    try:
        assert client.images.get(tiny_image).tag(repository, tag)
        try:
            _push(client, repository, tag, ecr)
        finally:
            client.images.remove(f"{repository}:{tag}")
    finally:
        client.close()
    with ecr.session() as session:
        response = session.get(f"{ecr.url}/v2/nightly/tiny/tags/list", timeout=10)
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "nightly/tiny", "tags": [tag]}


@pytest.mark.registry
def test_registries_reject_bad_credentials(registries: Registries) -> None:
    ecr, acr = registries.ecr, registries.acr
    assert ecr.username != acr.username and ecr.password != acr.password
    for registry in registries:
        with registry.session(authenticated=False) as session:
            anonymous = session.get(f"{registry.url}/v2/", timeout=10)
            assert anonymous.status_code == 401
            assert anonymous.headers["WWW-Authenticate"].startswith("Basic realm=")
            wrong = session.get(f"{registry.url}/v2/", auth=(registry.username, "wrong"), timeout=10)
            assert wrong.status_code == 401
            right = session.get(f"{registry.url}/v2/", auth=registry.auth, timeout=10)
            assert right.status_code == 200
    # one registry's credentials are not the other's
    with acr.session(authenticated=False) as session:
        crossed = session.get(f"{acr.url}/v2/", auth=ecr.auth, timeout=10)
    assert crossed.status_code == 401


@pytest.mark.docker
@pytest.mark.registry
def test_engine_login_rejects_bad_credentials(docker_engine: DockerEngine, registries: Registries) -> None:
    ecr = registries.ecr
    client = docker_engine.client()
    try:
        with pytest.raises(docker.errors.APIError) as error:
            client.login(username=ecr.username, password="wrong", registry=ecr.host, reauth=True)
        assert "401" in str(error.value) or "unauthorized" in str(error.value).lower()
        assert client.login(username=ecr.username, password=ecr.password, registry=ecr.host, reauth=True)
    finally:
        client.close()


@pytest.mark.registry
def test_faulty_proxy_injects_then_forwards(faulty_acr: FaultyProxy, registries: Registries) -> None:
    acr = registries.acr
    faulty_acr.fail("GET", "/v2/", [500])
    faulty_acr.fail("GET", "/v2/", [429], retry_after="2")  # rules are used up in order
    statuses = []
    with faulty_acr.session(acr.auth) as session:
        first = session.get(f"{faulty_acr.url}/v2/", timeout=10)
        assert first.json() == {"errors": [{"code": "UNAVAILABLE", "message": "injected", "detail": 500}]}
        assert "Retry-After" not in first.headers
        second = session.get(f"{faulty_acr.url}/v2/", timeout=10)
        assert second.headers["Retry-After"] == "2"
        assert second.json()["errors"][0]["code"] == "TOOMANYREQUESTS"
        third = session.get(f"{faulty_acr.url}/v2/", timeout=10)
        assert third.headers["Docker-Distribution-Api-Version"] == "registry/2.0"
        statuses = [first.status_code, second.status_code, third.status_code]
    assert statuses == [500, 429, 200]
    assert faulty_acr.pending_faults() == 0
    assert faulty_acr.log == [
        ProxiedRequest("GET", "/v2/", "", 500, injected=True),
        ProxiedRequest("GET", "/v2/", "", 429, injected=True),
        ProxiedRequest("GET", "/v2/", "", 200, injected=False),
    ]


@pytest.mark.registry
def test_faulty_proxy_streams_blobs_and_points_locations_at_itself(
    faulty_acr: FaultyProxy, registries: Registries
) -> None:
    acr = registries.acr
    blob = secrets.token_bytes(1024 * 1024) * 24  # 24 MiB, uploaded chunked and read back
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    repo = f"nightly/blobs-{secrets.token_hex(3)}"
    with faulty_acr.session(acr.auth) as session:
        start = session.post(f"{faulty_acr.url}/v2/{repo}/blobs/uploads/", timeout=10)
        assert start.status_code == 202, start.text
        location = start.headers["Location"]
        assert location.startswith(f"{faulty_acr.url}/v2/{repo}/blobs/uploads/") or location.startswith("/")

        def pieces() -> Iterator[bytes]:
            for offset in range(0, len(blob), 1024 * 1024):
                yield blob[offset : offset + 1024 * 1024]

        patch = session.patch(
            location,
            data=pieces(),
            headers={"Content-Type": "application/octet-stream"},
            timeout=60,
        )
        assert patch.status_code == 202, patch.text
        assert patch.headers["Location"].startswith(faulty_acr.url)
        put = session.put(patch.headers["Location"], params={"digest": digest}, timeout=60)
        assert put.status_code == 201, put.text
        assert put.headers["Location"] == f"{faulty_acr.url}/v2/{repo}/blobs/{digest}"
        head = session.head(f"{faulty_acr.url}/v2/{repo}/blobs/{digest}", timeout=10)
        assert head.status_code == 200
        assert int(head.headers["Content-Length"]) == len(blob)
        with session.get(f"{faulty_acr.url}/v2/{repo}/blobs/{digest}", stream=True, timeout=60) as got:
            assert got.status_code == 200
            hasher = hashlib.sha256()
            for piece in got.iter_content(1024 * 1024):
                hasher.update(piece)
        assert "sha256:" + hasher.hexdigest() == digest
    methods = [(entry.method, entry.status) for entry in faulty_acr.log]
    assert methods == [("POST", 202), ("PATCH", 202), ("PUT", 201), ("HEAD", 200), ("GET", 200)]


@pytest.mark.docker
@pytest.mark.registry
def test_engine_push_through_faulty_proxy(
    docker_engine: DockerEngine, tiny_image: str, faulty_acr: FaultyProxy, registries: Registries
) -> None:
    """The engine follows the registry's Location URLs through the proxy, and does not retry a
    manifest PUT that failed with 503: the push fails; pushing again uploads only the manifest."""
    acr = registries.acr
    repository, tag = f"{faulty_acr.host}/nightly/tiny", "via-proxy"
    auth = {"username": acr.username, "password": acr.password, "serveraddress": faulty_acr.host}
    faulty_acr.fail("PUT", r"/v2/nightly/tiny/manifests/.*", [503])
    client = docker_engine.client()
    try:
        assert client.images.get(tiny_image).tag(repository, tag)
        try:
            first = list(client.images.push(repository, tag, auth_config=auth, stream=True, decode=True))
            uploads = len(faulty_acr.log)
            second = list(client.images.push(repository, tag, auth_config=auth, stream=True, decode=True))
        finally:
            client.images.remove(f"{repository}:{tag}")
    finally:
        client.close()
    assert first[-1].get("error") == "received unexpected HTTP status: 503 Service Unavailable"
    assert not [event for event in second if "error" in event], second
    first_push, second_push = faulty_acr.log[:uploads], faulty_acr.log[uploads:]
    # blob uploads went to the Location the registry gave: the proxy, not the registry's own port
    assert {entry.method for entry in first_push} >= {"POST", "PATCH", "PUT", "HEAD"}
    assert [(e.method, e.status) for e in first_push if e.path.endswith("/manifests/via-proxy")] == [
        ("PUT", 503)
    ]
    assert [e.method for e in second_push if "/blobs/uploads/" in e.path] == []
    assert [(e.method, e.status) for e in second_push if e.path.endswith("/manifests/via-proxy")] == [
        ("PUT", 201)
    ]
    with acr.session() as session:
        tags = session.get(f"{acr.url}/v2/nightly/tiny/tags/list", timeout=10)
    assert tag in tags.json()["tags"]
