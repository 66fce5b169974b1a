"""`docker-compose up` of the deployment on the test engine, end to end, as deploy/README.md runs it.

The deploy images are built offline (deploy_builds.py). Compose brings up the code server, the
webserver and the daemon with the external-PostgreSQL override, against the host's PostgreSQL and
MariaDB peers and the fake Slack. A night launched through the UI's GraphQL (the backfill mutation
the UI's dialog sends) runs in a run container and lands in the warehouse; a run container killed
mid-night is failed by run monitoring and re-run by run_retries; then everything is torn down.

The test engine publishes no ports (dockerd runs without iptables or a userland proxy), so the
webserver is reached at its address on the compose network, and the containers reach the host's
peers through relays on that network's gateway (peers/relay.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import secrets
import subprocess
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker  # type: ignore[import-untyped]
import psycopg2
import pymysql
import pytest

from nightly_assets.results import NightKey
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.compose_cli import COMPOSE_FILE, run_compose
from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.peers.http_api import FakeHttpServer
from nightly_assets_tests.peers.relay import tcp_relay
from nightly_assets_tests.peers.slack_api import FakeSlack
from nightly_assets_tests.waiting import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.mysql, pytest.mark.slow, pytest.mark.deploy_images]

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "nightly_e2e"
OVERRIDE = ROOT / "deploy" / "docker-compose.external-postgres.yml"
LOCATION = "nightly_assets"
# Nights of the demo whose pinned sample commit passes its tests (0.1.0; 0.2.0 lands on 11-06).
NIGHT, KILLED_NIGHT = "2026-11-03", "2026-11-04"
SLACK_TOKEN = "xoxb-nightly-compose"
# A /24 for the compose network that the test picks outside every route of this host.
SUBNET_CANDIDATES = tuple(f"172.31.{n}.0/24" for n in range(240, 255))
COMPOSE_TIMEOUT_S = 600
T = TypeVar("T")


@dataclass
class Deployment:
    engine: DockerEngine
    env: dict[str, str]
    workdir: Path
    files: tuple[Path, ...]  # the repository's compose file, the override, the test's network
    graphql: str
    warehouse_url: str  # as this host reaches it

    def compose(self, *args: str, timeout: int = COMPOSE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return run_compose(args, self.env, self.workdir, self.files, PROJECT, timeout)

    def query(self, text: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": text, "variables": variables or {}}).encode()
        request = urllib.request.Request(  # noqa: S310 - the compose network's address
            self.graphql, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            answer = json.loads(response.read())
        assert "errors" not in answer, answer["errors"]
        return answer["data"]

    def runs(self, tag: str, value: str) -> list[dict[str, Any]]:
        data = self.query(
            "query($f: RunsFilter) { runsOrError(filter: $f) { __typename"
            " ... on Runs { results { runId status tags { key value } } } } }",
            {"f": {"tags": [{"key": tag, "value": value}]}},
        )["runsOrError"]
        assert data["__typename"] == "Runs", data
        return [{**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in data["results"]]

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float) -> T:
        """`waiting.wait_for`, its timeout followed by the services' logs."""
        try:
            return wait_for(what, probe, timeout_s, every_s)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{_diagnose(self)}") from None


def _free_subnet() -> ipaddress.IPv4Network:
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    taken = [ipaddress.ip_network(line.split()[0]) for line in routes.splitlines() if "/" in line.split()[0]]
    for candidate in map(ipaddress.IPv4Network, SUBNET_CANDIDATES):
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    pytest.fail(f"every candidate subnet for the compose network is routed here: {SUBNET_CANDIDATES}")


@contextlib.contextmanager
def _databases() -> Iterator[tuple[str, str]]:
    """A fresh PostgreSQL database for the instance and a MariaDB one for the warehouse."""
    name = f"nightly_compose_{secrets.token_hex(4)}"
    pg = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=5)
    pg.autocommit = True
    maria = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
    try:
        with pg.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        with maria.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}`")
        yield name, name
    finally:
        with contextlib.suppress(Exception), pg.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with contextlib.suppress(Exception), maria.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        pg.close()
        maria.close()


def _remove_run_containers(engine: DockerEngine) -> None:
    """The run containers DockerRunLauncher started on the compose network: compose does not know
    them, so `down` neither stops them nor, while they hold an endpoint, removes the network."""
    client = engine.client()
    try:
        for container in client.containers.list(all=True, filters={"label": "dagster/run_id"}):
            if "nightly_network" in container.attrs["NetworkSettings"]["Networks"]:
                with contextlib.suppress(docker.errors.NotFound):  # auto_remove may be quicker
                    container.remove(force=True)
    finally:
        client.close()


def _take_down(engine: DockerEngine, compose: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """Everything the deployment started, its runs' containers, network and volumes included."""
    compose("stop", "daemon")  # no run is launched past this point
    _remove_run_containers(engine)
    down = compose("down", "--volumes", "--remove-orphans", "--timeout", "20")
    assert down.returncode == 0, f"docker-compose down failed:\n{down.stderr[-4000:]}"


def _container_address(engine: DockerEngine, service: str) -> str:
    client = engine.client()
    try:
        [container] = client.containers.list(
            filters={
                "label": [f"com.docker.compose.project={PROJECT}", f"com.docker.compose.service={service}"]
            }
        )
        networks = container.attrs["NetworkSettings"]["Networks"]
        addresses = [n["IPAddress"] for n in networks.values() if n.get("IPAddress")]
        assert len(addresses) == 1, f"{service} is on {networks}, not on the compose network alone"
        return addresses[0]
    finally:
        client.close()


def _location_loaded(deployment: Deployment) -> bool:
    """The code location is up with its definitions. Unreachable is waited out (the webserver asks
    again every 10 s); any other load error fails here, naming it."""
    query = (
        "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus"
        " locationOrLoadError { __typename ... on PythonError { message stack } } } } } }"
    )
    try:
        entries = deployment.query(query)["workspaceOrError"]["locationEntries"]
    except (OSError, ValueError, AssertionError):
        return False
    for entry in entries:
        if entry["name"] != LOCATION or entry["loadStatus"] != "LOADED":
            continue
        error = entry["locationOrLoadError"] or {}
        if error.get("__typename") != "PythonError":
            return True
        if "Unreachable" in error["message"] or "Could not reach" in error["message"]:
            return False
        stack = "".join(error.get("stack") or [])
        pytest.fail(
            f"the code location loaded with an error: {error['message']}\n{stack}\n{_diagnose(deployment)}"
        )
    return False


def _failures(deployment: Deployment, run_id: str) -> list[str]:
    """The run's step failures and engine errors, as its page in the UI lists them."""
    events = deployment.query(
        "query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename"
        " ... on MessageEvent { message stepKey }"
        " ... on ExecutionStepFailureEvent { error { message causes { message } } }"
        " ... on RunFailureEvent { error { message } } ... on EngineEvent { error { message } } } } } }",
        {"id": run_id},
    )["logsForRun"]["events"]
    failed = ("ExecutionStepFailureEvent", "RunFailureEvent", "EngineEvent")
    return [
        f"{e['__typename']} {e.get('stepKey')}: {e['message']} {json.dumps(e.get('error'))}"
        for e in events
        if e["__typename"] in failed and (e["__typename"] != "EngineEvent" or e.get("error"))
    ]


def _diagnose(deployment: Deployment, runs: Sequence[dict[str, Any]] = ()) -> str:
    logs = deployment.compose("logs", "--no-color", "--tail", "40", timeout=120)
    failures = [
        line for run in runs if run["status"] != "SUCCESS" for line in _failures(deployment, run["runId"])
    ]
    return "\n".join(failures)[-8000:] + "\n" + logs.stdout[-6000:] + logs.stderr[-2000:]


@pytest.fixture(scope="module")
def deployment(
    docker_engine: DockerEngine,
    deploy_images: dict[str, str],
    mysql_server: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    if docker_engine.from_env or not docker_engine.host.startswith("unix://"):
        pytest.skip("compose mounts the engine's socket into the daemon: needs the peer's local engine")
    workdir = tmp_path_factory.mktemp("compose")
    subnet = _free_subnet()
    gateway = str(next(subnet.hosts()))
    network_file = workdir / "network.yml"
    # Compose 1.29 replaces a top-level network's whole entry from a later file: name and driver again.
    network = {
        "nightly_network": {
            "name": "nightly_network",
            "driver": "bridge",
            "ipam": {"config": [{"subnet": str(subnet)}]},
        }
    }
    network_file.write_text(json.dumps({"version": "3.7", "networks": network}))  # JSON is YAML
    with _databases() as (instance_db, warehouse_db), contextlib.ExitStack() as stack:
        slack_server = FakeHttpServer(FakeSlack(token=SLACK_TOKEN).respond, "fake-slack")
        stack.callback(slack_server.stop)
        slack_port = int(slack_server.url.rsplit(":", 1)[1])
        env = {
            **docker_engine.env(),
            "COMPOSE_HTTP_TIMEOUT": str(COMPOSE_TIMEOUT_S),  # container starts are slow on a busy engine
            "DOCKER_SOCKET": docker_engine.host.removeprefix("unix://"),
            "DAGSTER_POSTGRES_HOST": gateway,
            "DAGSTER_POSTGRES_USER": "postgres",
            "DAGSTER_POSTGRES_PASSWORD": secrets.token_hex(8),  # the peer trusts loopback; still required
            "DAGSTER_POSTGRES_DB": instance_db,
            "NIGHTLY_WAREHOUSE_URL": f"mysql+pymysql://root@{gateway}:3306/{warehouse_db}?charset=utf8mb4",
            "SLACK_BOT_TOKEN": SLACK_TOKEN,
            "NIGHTLY_SLACK_API_URL": f"http://{gateway}:{slack_port}/api/",
            "NIGHTLY_ARTEFACTS_BUCKET": "nightly-compose-e2e",  # no credentials: kept local, said once
            # Air-gapped, as deploy/README.md says: the runs install from the code image's wheelhouse.
            "NIGHTLY_WHEELHOUSE": "/opt/dagster/wheelhouse",
        }
        files = (COMPOSE_FILE, OVERRIDE, network_file)

        def compose(*args: str) -> subprocess.CompletedProcess[str]:
            return run_compose(args, env, workdir, files, PROJECT, COMPOSE_TIMEOUT_S)

        _take_down(docker_engine, compose)  # what an interrupted run here left (its network: a stale gateway)
        stack.callback(_take_down, docker_engine, compose)
        created = compose("up", "--no-build", "--no-start")
        assert created.returncode == 0, f"docker-compose up --no-start failed:\n{created.stderr[-4000:]}"
        # The network exists now, and with it the gateway address the relays listen on.
        for port in (5432, 3306, slack_port):
            stack.enter_context(tcp_relay((gateway, port), ("127.0.0.1", port)))
        up = compose("up", "--no-build", "--detach")
        assert up.returncode == 0, f"docker-compose up failed:\n{up.stderr[-4000:]}"
        deployment = Deployment(
            docker_engine,
            env,
            workdir,
            files,
            f"http://{_container_address(docker_engine, 'webserver')}:3000/graphql",
            f"mysql+pymysql://root@127.0.0.1:3306/{warehouse_db}?charset=utf8mb4",
        )
        deployment.wait_for(
            "the code location in the webserver", lambda: _location_loaded(deployment), 300, 2
        )
        init = deployment.compose("exec", "-T", "user_code", "nightly", "init", timeout=300)
        assert init.returncode == 0, init.stdout + init.stderr
        yield deployment


def _launch_night(deployment: Deployment, night: str) -> str:
    """The backfill the UI's "Materialize all…" dialog launches: every demo asset, one partition."""
    nodes = deployment.query(
        "query($g: AssetGroupSelector) { assetNodes(group: $g) { assetKey { path } } }",
        {"g": {"groupName": "demo", "repositoryName": "__repository__", "repositoryLocationName": LOCATION}},
    )["assetNodes"]
    assert nodes, f"the demo group has no assets in the webserver\n{_diagnose(deployment)}"
    launched = deployment.query(
        "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {"
        " __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }",
        {"p": {"assetSelection": [n["assetKey"] for n in nodes], "partitionNames": [f"{night}|cpu"]}},
    )["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


def _ended(runs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    done = {"SUCCESS", "FAILURE", "CANCELED"}
    return runs if runs and all(r["status"] in done for r in runs) else None


def _night_row(deployment: Deployment, night: str) -> Any:
    """The night's row once it has a final status (the summary run writes it)."""
    store = Warehouse(deployment.warehouse_url)
    try:
        row = store.night(NightKey("demo", dt.date.fromisoformat(night), "cpu"))
        return row if row is not None and row.status != "running" else None
    finally:
        store.dispose()


def test_a_night_launched_from_graphql_runs_in_a_container_and_lands_in_the_warehouse(
    deployment: Deployment,
) -> None:
    backfill = _launch_night(deployment, NIGHT)
    runs = deployment.wait_for(
        "the backfill's runs to end", lambda: _ended(deployment.runs("dagster/backfill", backfill)), 600, 3
    )
    assert {r["status"] for r in runs} == {"SUCCESS"}, _diagnose(deployment, runs)
    assert all(r["tags"].get("docker/container_id") for r in runs), "a run did not run in a container"
    row = wait_for("the night's final status in the warehouse", lambda: _night_row(deployment, NIGHT), 120, 2)
    assert row.status == "success" and row.run_id in {r["runId"] for r in runs}, row


def test_a_killed_run_container_is_failed_and_retried(deployment: Deployment) -> None:
    backfill = _launch_night(deployment, KILLED_NIGHT)
    client = deployment.engine.client()
    try:

        def running_container() -> tuple[str, Any] | None:
            for run in deployment.runs("dagster/backfill", backfill):
                container_id = run["tags"].get("docker/container_id")
                if run["status"] == "STARTED" and container_id:
                    with contextlib.suppress(docker.errors.NotFound):
                        container = client.containers.get(container_id)
                        if container.status == "running":
                            return run["runId"], container
            return None

        killed_run, container = deployment.wait_for("a run container to start", running_container, 300, 1)
        container.kill()  # the run worker dies (OOM, a crash) without reporting its run
        retried = deployment.wait_for(
            "run monitoring to fail the run and run_retries to re-run it to its end",
            lambda: _ended(deployment.runs("dagster/parent_run_id", killed_run)),
            600,
            3,
        )
    finally:
        client.close()
    [first] = [r for r in deployment.runs("dagster/backfill", backfill) if r["runId"] == killed_run]
    assert first["status"] == "FAILURE", first
    assert [r["status"] for r in retried] == ["SUCCESS"], _diagnose(deployment, retried)
    assert retried[0]["tags"].get("dagster/retry_number") == "1"
    row = wait_for("the retried night in the warehouse", lambda: _night_row(deployment, KILLED_NIGHT), 120, 2)
    assert row.status == "success" and row.run_id == retried[0]["runId"], row
