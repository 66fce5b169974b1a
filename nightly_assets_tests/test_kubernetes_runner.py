"""The kubernetes runner kind: the pod spec (checked against Kubernetes' JSON schemas), the runner
pool's `kubernetes:` block (a bad entry names the runner label and the field), the cluster settings,
and torch_spyre/tests_device run as a pod by the real `kubernetes` client and dagster-k8s's
`PipesK8sClient` against a fake API server replaying a recorded conversation (peers/k8s_api.py):
success, a pod killed by the kernel, a pod no node takes, and a run interrupted while the pod runs.
Every pod is deleted; no secret reaches the pod spec, the logs or the run config.

Nothing here ran against a live cluster: there is no API server on this machine (PEERS.md).
"""

import datetime as dt
import json
import os
import random
import signal
import threading
from pathlib import Path

import dagster as dg
import kubernetes_validate
import pytest
import yaml

from nightly_assets.catalog.loader import CatalogError, load_catalog
from nightly_assets.containers import suite_entry
from nightly_assets.definitions import build_definitions
from nightly_assets.kubernetes import pipes as k8s_pipes
from nightly_assets.kubernetes.models import KubernetesPlacement
from nightly_assets.kubernetes.pipes import FileShippingLogsReader
from nightly_assets.kubernetes.pods import DEADLINE_MARGIN_S, TOOLS_ENV, PodSpecBuilder
from nightly_assets.kubernetes.resources import KubernetesClusterResource, KubernetesConfigError
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.settings import env_var_names
from nightly_assets_tests.catalog_files import copy_catalog

K8S_VERSION = "1.30"  # OpenShift 4.17's Kubernetes
NIGHT = NightKey("torch_spyre", dt.date(2026, 11, 4), "pytorch-pinned")
DEVICE_SUITE = dg.AssetKey(["torch_spyre", "tests_device"])
IMAGE = "registry.example/torch-spyre/runtime:nightly-pytorch-pinned-2026-11-04"
TOKEN = "kubeconfig-canary-token-7f3e91"
PLACEMENT = KubernetesPlacement.model_validate(
    {
        "namespace": "torch-spyre-ci",
        "node_selector": {"ibm.com/aiu.present": "true"},
        "tolerations": [{"key": "ibm.com/aiu", "operator": "Exists", "effect": "NoSchedule"}],
        "extended_resources": {"ibm.com/aiu": 2},
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"memory": "64Gi"},
        "service_account": "spyre-tests",
        "image_pull_secrets": ["quay-pull"],
        "secret_env": {"HF_TOKEN": {"secret": "hf-read", "key": "token"}},
    }
)


def _pod(placement: KubernetesPlacement = PLACEMENT) -> dict:
    return PodSpecBuilder("spyre-aiu", placement).manifest(
        name="dagster-0b1c2d3e-torch-spyre--tests-d-0123456789",
        image=IMAGE,
        entry_command=["python3", "/opt/nightly-pipes/suite_entry.py", "--rootdir", "/opt/nightly/work"],
        env={"NIGHTLY_EXPECTED_DEVICES": "1"},
        labels={"pipeline": "torch_spyre", "stage": "tests_device", "night": "2026-11-04"},
        timeout_s=3600,
    )


# -- the pod spec ------------------------------------------------------------------------------


def test_the_pod_validates_against_the_kubernetes_schemas_and_places_itself_as_the_runner_says():
    pod = _pod()
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["nodeSelector"] == {"ibm.com/aiu.present": "true"}
    assert spec["tolerations"] == [{"key": "ibm.com/aiu", "operator": "Exists", "effect": "NoSchedule"}]
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi", "ibm.com/aiu": "2"},
        "limits": {"memory": "64Gi", "ibm.com/aiu": "2"},
    }
    assert spec["activeDeadlineSeconds"] == 3600 + DEADLINE_MARGIN_S
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "spyre-tests"
    assert spec["imagePullSecrets"] == [{"name": "quay-pull"}]
    assert container["image"] == IMAGE
    assert container["command"][:2] == ["python3", "-c"]  # unpacks the entry script, then runs it
    assert container["command"][3:] == ["/opt/nightly-pipes/suite_entry.py", "--rootdir", "/opt/nightly/work"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-read", "key": "token"}},
    }
    assert set(env) == {TOOLS_ENV, "HF_TOKEN", "NIGHTLY_EXPECTED_DEVICES"}
    assert pod["metadata"]["labels"]["nightly/runner"] == "spyre-aiu"
    assert pod["metadata"]["labels"]["nightly/stage"] == "tests_device"


def test_the_schema_check_refuses_a_broken_pod():
    """The schemas do catch what the builder must never produce (the check above can fail)."""
    pod = _pod()
    pod["spec"]["tolerations"] = "ibm.com/aiu"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_the_shipped_spyre_runner_gives_a_valid_pod_without_secrets():
    runner = load_catalog().runners["spyre-aiu"]
    assert runner.kind == "kubernetes" and runner.pool == "aiu"
    assert runner.kubernetes is not None and runner.kubernetes.extended_resources == {"ibm.com/aiu": 1}
    pod = _pod(runner.kubernetes)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert pod["metadata"].get("namespace") is None  # the namespace is the request's path
    assert all(
        "valueFrom" in e or e["name"] in (TOOLS_ENV, "NIGHTLY_EXPECTED_DEVICES")
        for e in pod["spec"]["containers"][0]["env"]
    )


def test_the_pods_tools_unpack_and_run_the_entry_script(tmp_path):
    """The bootstrap in the pod's command, run here: it unpacks the tools from the environment and
    hands over to the command the docker runner would run."""
    import base64
    import subprocess
    import sys

    from nightly_assets.containers.runner import tools_archive
    from nightly_assets.kubernetes.pods import BOOTSTRAP

    tools = base64.b64encode(tools_archive(compress=True)).decode()
    probe = "import sys; print('entry ran with', sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP.replace("'/'", repr(str(tmp_path))), "-c", probe, "a", "b"],
        env={**os.environ, TOOLS_ENV: tools},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "entry ran with ['a', 'b']"
    assert (tmp_path / "opt" / "nightly-pipes" / "suite_entry.py").is_file()
    assert (tmp_path / "opt" / "nightly-pipes" / "dagster_pipes" / "__init__.py").is_file()


# -- the runner pool's kubernetes block ------------------------------------------------------------


def _edit_runner(catalog: Path, label: str, change) -> None:
    path = catalog / "runners.yaml"
    document = yaml.safe_load(path.read_text())
    change(document["runners"][label])
    path.write_text(yaml.safe_dump(document))


@pytest.mark.parametrize(
    ("label", "change", "expected"),
    [
        (
            "spyre-aiu",
            lambda r: r.pop("kubernetes"),
            "runners.spyre-aiu: kubernetes: a runner of kind kubernetes says where its pods go",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"]["tolerations"][0].update(effect="NoScheduel"),
            "runners.spyre-aiu.kubernetes.tolerations[0].effect: Input should be 'NoSchedule', "
            "'PreferNoSchedule' or 'NoExecute' (got 'NoScheduel')",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"]["tolerations"][0].update(value="yes"),
            "runners.spyre-aiu.kubernetes.tolerations[0]: value: operator Exists matches any value",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"].update(extended_resources={"aiu": 1}),
            "runners.spyre-aiu.kubernetes.extended_resources.aiu: 'aiu': expected a fully qualified "
            "extended resource name",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"].update(extended_resources={"ibm.com/aiu": 0}),
            "runners.spyre-aiu.kubernetes.extended_resources.ibm.com/aiu: Input should be greater than or "
            "equal to 1 (got 0)",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"].update(namespace="Torch_Spyre"),
            "runners.spyre-aiu.kubernetes.namespace: 'Torch_Spyre': expected a DNS label",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"]["requests"].update(memory="lots"),
            "runners.spyre-aiu.kubernetes.requests.memory: 'lots': expected a Kubernetes quantity",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"].update(node_selector={"ibm.com/aiu.present": "yes please"}),
            "runners.spyre-aiu.kubernetes.node_selector.ibm.com/aiu.present: 'yes please': "
            "expected a label value",
        ),
        (
            "spyre-aiu",
            lambda r: r["kubernetes"].update(secret_env={"HF_TOKEN": "hf_live_value"}),
            "runners.spyre-aiu.kubernetes.secret_env.HF_TOKEN: Input should be a valid dictionary",
        ),
        (
            "spyre-aiu",
            lambda r: r.update(gpus=4),
            "runners.spyre-aiu: gpus: a kubernetes runner's pod sees the cards kubernetes.extended_resources "
            "asks for (1); leave 'gpus' out or make it 1 (got 4)",
        ),
        (
            "gpu-l40-amd64",
            lambda r: r.update(kubernetes={"namespace": "ci"}),
            "runners.gpu-l40-amd64: kubernetes: only a runner of kind kubernetes takes it, not 'docker'",
        ),
    ],
)
def test_a_bad_kubernetes_runner_names_its_label_and_field(tmp_path, label, change, expected):
    catalog = copy_catalog(tmp_path / "catalog")
    _edit_runner(catalog, label, change)
    with pytest.raises(CatalogError) as error:
        load_catalog(catalog)
    assert f"runners.yaml: {expected}" in str(error.value)


def test_a_wheels_stage_cannot_name_a_kubernetes_runner(tmp_path):
    from nightly_assets_tests.catalog_files import edit_pipeline

    catalog = copy_catalog(tmp_path / "catalog")
    edit_pipeline(catalog, "torch_spyre", lambda d: d["stages"][3].update(runner="spyre-aiu"))
    with pytest.raises(
        CatalogError, match=r"stage 'wheels' \(wheels\) cannot run on 'spyre-aiu' \(kubernetes\)"
    ):
        load_catalog(catalog)


# -- the cluster settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"api_url": "https://api.ocp:6443", "kubeconfig": "/k"},
            "api_url (NIGHTLY_K8S_API_URL) and a kubeconfig",
        ),
        (
            {"in_cluster": True, "context": "ci"},
            "in_cluster (NIGHTLY_K8S_IN_CLUSTER) uses the pod's service account",
        ),
        ({"token": "secret-value-1"}, "token (NIGHTLY_K8S_TOKEN) goes with api_url (NIGHTLY_K8S_API_URL)"),
    ],
)
def test_contradicting_cluster_settings_are_named(settings, expected):
    cluster = KubernetesClusterResource(**settings)
    with pytest.raises(KubernetesConfigError) as error:
        cluster.configure()
    assert expected in str(error.value)
    assert "secret-value-1" not in str(error.value)


def test_a_missing_kubeconfig_is_named(tmp_path):
    with pytest.raises(KubernetesConfigError, match=rf"kubeconfig {tmp_path}/none cannot be used"):
        KubernetesClusterResource(kubeconfig=str(tmp_path / "none")).configure()


def test_local_mode_without_a_cluster_runs_pods_on_docker_and_prod_needs_one(nightly_home, monkeypatch):
    for name in (
        "NIGHTLY_K8S_KUBECONFIG",
        "NIGHTLY_K8S_API_URL",
        "NIGHTLY_K8S_IN_CLUSTER",
        "NIGHTLY_K8S_STAND_IN",
    ):
        monkeypatch.delenv(name, raising=False)
    assert resources_for("local", nightly_home)["kubernetes"].stand_in == "docker"
    assert resources_for("prod", nightly_home)["kubernetes"].stand_in == "none"
    monkeypatch.setenv("NIGHTLY_K8S_KUBECONFIG", "/etc/nightly/kubeconfig")
    assert resources_for("local", nightly_home)["kubernetes"].stand_in == "none"


def test_a_kubernetes_runners_image_must_be_in_a_registry(tmp_path):
    from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR
    from nightly_assets.manifests import EnvironmentManifest
    from nightly_assets.partitions import pipeline_partitions
    from nightly_assets.runners.kubernetes import pod_image
    from nightly_assets.runners.protocol import StageWork
    from nightly_assets.stages import StageNotAvailable, StageRun, StageSpec

    catalog = load_catalog()
    pipeline = catalog.pipelines["torch_spyre"]
    spec = StageSpec(
        catalog, BUILTIN_CATALOG_DIR, pipeline, pipeline.stage("tests_device"), pipeline_partitions(pipeline)
    )
    run = StageRun(NIGHT, pipeline.targets[0], "spyre-aiu", catalog.runners["spyre-aiu"], tmp_path)
    local_only = EnvironmentManifest(
        mode="image",
        python="python3",
        rootdir="/opt/nightly/work",
        local_tag="nightly/x:1",
        reference="nightly/x:1",
    )
    work = StageWork(context=None, spec=spec, run=run, environment=local_only)  # type: ignore[arg-type]
    with pytest.raises(
        StageNotAvailable, match="was pushed to no registry, and the pods of 'spyre-aiu' pull"
    ):
        pod_image(work)


# -- Pipes output files --------------------------------------------------------------------------


def test_output_files_come_back_through_pipes_messages_in_parts(tmp_path):
    class Pipes:
        def __init__(self) -> None:
            self.messages: list[dict] = []

        def report_custom_message(self, payload: dict) -> None:
            self.messages.append(payload)

    out = tmp_path / "out"
    out.mkdir()
    big = random.Random(7).randbytes(60_000)  # incompressible: several parts
    (out / "junit.xml").write_bytes(big)
    (out / "result.json").write_text('{"returncode": 0}')
    pipes = Pipes()
    suite_entry.report_files(pipes, str(out))
    parts = [m for m in pipes.messages if m["nightly_file"] == "junit.xml"]
    assert len(parts) > 3 and all(len(m["gzip_base64"]) <= suite_entry.FILE_PART_CHARS for m in parts)
    reader = FileShippingLogsReader()
    for message in reversed(pipes.messages):  # in any order
        reader.keep(message)
    back, broken = reader.write_files(tmp_path / "back")
    assert [p.name for p in back] == ["junit.xml", "result.json"] and broken == []
    assert (tmp_path / "back" / "junit.xml").read_bytes() == big
    incomplete = FileShippingLogsReader()
    for message in pipes.messages[1:]:  # the pod stopped before the first part
        incomplete.keep(message)
    written, broken = incomplete.write_files(tmp_path / "partial")
    assert [p.name for p in written] == ["result.json"]
    assert broken == [f"junit.xml: {len(parts) - 1} of {len(parts)} part(s) came back"]
    damaged = FileShippingLogsReader()
    for message in pipes.messages:
        damaged.keep({**message, "gzip_base64": "!!"} if message is parts[0] else message)
    written, broken = damaged.write_files(tmp_path / "damaged")
    assert [p.name for p in written] == ["result.json"] and broken[0].startswith(
        "junit.xml: damaged in transfer"
    )


# -- torch_spyre/tests_device as a pod, against the fake API server -------------------------------


@pytest.fixture
def cluster_env(k8s_api, nightly_home, tmp_path, monkeypatch):
    """The local resources, the cluster being the fake API server through a kubeconfig."""
    for name in (
        "NIGHTLY_K8S_API_URL",
        "NIGHTLY_K8S_TOKEN",
        "NIGHTLY_K8S_IN_CLUSTER",
        "NIGHTLY_K8S_STAND_IN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NIGHTLY_K8S_KUBECONFIG", str(k8s_api.kubeconfig(tmp_path / "kubeconfig", TOKEN)))
    monkeypatch.setenv("NIGHTLY_K8S_POLL_S", "0.05")
    return k8s_api


def _device_suite(
    home: Path, tmp_path: Path, raise_on_error: bool = False, shards: int | None = None
) -> dict:
    """torch_spyre/tests_device of the shipped catalog (`shards`: in that many shards) materialized
    on its own for NIGHT, after the image stage pushed tonight's image; what the run left behind
    comes back."""
    resources = resources_for("local", home)
    artefacts = resources["artefacts"]
    artefacts.write_manifest(
        NIGHT,
        "image",
        {
            "mode": "image",
            "python": "/usr/bin/python3",
            "rootdir": "/opt/nightly/work",
            "local_tag": "nightly/torch-spyre-image:pytorch-pinned-2026-11-04",
            "reference": IMAGE,
            "primary_registry": "ecr",
        },
    )
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        catalog = None
        if shards is not None:
            catalog = copy_catalog(tmp_path / "catalog")
            defs = catalog / "torch_spyre" / "defs.yaml"
            shipped = "suite: {markers: spyre_device,"
            defs.write_text(
                defs.read_text().replace(shipped, f"suite: {{shards: {shards}, markers: spyre_device,")
            )
        result = dg.materialize(
            [build_definitions(catalog).get_assets_def(DEVICE_SUITE)],
            partition_key=f"{NIGHT.night.isoformat()}|{NIGHT.target}",
            resources=resources,
            instance=instance,
            raise_on_error=raise_on_error,
        )
        run = instance.get_run_by_id(result.run_id)
        assert run is not None
        events = "\n".join(str(e) for e in instance.all_logs(result.run_id))
        with dg.build_resources({"warehouse": resources["warehouse"]}) as resolved:
            store = resolved.warehouse.store()
            stage = {s.stage: s for s in store.stages(NIGHT)}["tests_device"]
        return {
            "result": result,
            "stage": stage,
            "events": events,
            "run_config": repr(run.run_config),
            "variables": env_var_names(resources["kubernetes"]),
        }


def _assert_pod_request(k8s_api, token: str) -> dict:
    """The one pod the client created: where it asked for it, with what, and no secret in it."""
    (created,) = k8s_api.created()
    (post,) = [s for s in k8s_api.requests if s.method == "POST"]
    assert post.path == "/api/v1/namespaces/torch-spyre-ci/pods"
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", **created}, K8S_VERSION, strict=True)
    spec = created["spec"]
    (container,) = spec["containers"]
    assert spec["nodeSelector"] == {"ibm.com/aiu.present": "true"}
    assert spec["tolerations"] == [{"key": "ibm.com/aiu", "operator": "Exists", "effect": "NoSchedule"}]
    assert container["resources"]["limits"] == {"memory": "64Gi", "ibm.com/aiu": "1"}
    assert container["resources"]["requests"] == {"cpu": "8", "memory": "32Gi", "ibm.com/aiu": "1"}
    assert container["image"] == IMAGE
    assert spec["activeDeadlineSeconds"] == 60 * 60 + DEADLINE_MARGIN_S  # the suite's 60 minutes
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {"DAGSTER_PIPES_CONTEXT", "DAGSTER_PIPES_MESSAGES", TOOLS_ENV} <= set(env)
    assert env["NIGHTLY_EXPECTED_DEVICES"] == "1"
    labels = created["metadata"]["labels"]
    assert labels["nightly/pipeline"] == "torch_spyre" and labels["nightly/runner"] == "spyre-aiu"
    assert "-m" in container["command"] and "spyre_device" in container["command"]
    # The token authenticated every call and reached nothing else.
    assert {s.authorization for s in k8s_api.requests} == {f"Bearer {token}"}
    assert token not in json.dumps(created)
    return created


def test_a_device_suite_runs_as_a_pod_and_its_report_comes_back(cluster_env, nightly_home, tmp_path):
    seen = _device_suite(nightly_home, tmp_path)
    result, stage = seen["result"], seen["stage"]
    assert result.success, stage.detail
    assert stage.status == "success" and stage.runner == "spyre-aiu"
    assert stage.detail == "2/3 passed"  # the recorded suite: two pass, one skipped on one card
    created = _assert_pod_request(cluster_env, TOKEN)
    calls = cluster_env.calls()
    assert calls[0] == "create" and calls[-1] == "delete"
    assert calls[1] == "read" and "log" in calls  # scheduled, then the Pipes messages from its log
    (delete,) = [s for s in cluster_env.requests if s.method == "DELETE"]
    assert delete.path == f"/api/v1/namespaces/torch-spyre-ci/pods/{created['metadata']['name']}"
    (materialization,) = result.asset_materializations_for_node("torch_spyre__tests_device")
    metadata = {k: v.value for k, v in materialization.metadata.items()}
    assert metadata["kubernetes/pod"] == created["metadata"]["name"]
    assert metadata["kubernetes/node"] == "aiu-worker-2.spyre.example"
    assert metadata["kubernetes/pod_deleted"] is True
    assert TOKEN not in seen["events"] and TOKEN not in seen["run_config"]
    assert "NIGHTLY_K8S_KUBECONFIG" in seen["variables"]  # the resource holds the variable's name


def test_the_api_url_and_token_reach_the_cluster_by_the_variables_name(
    k8s_api, nightly_home, tmp_path, monkeypatch
):
    secret = "sa-token-canary-41c8e2"
    for name in ("NIGHTLY_K8S_KUBECONFIG", "NIGHTLY_K8S_IN_CLUSTER", "NIGHTLY_K8S_STAND_IN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NIGHTLY_K8S_API_URL", k8s_api.url)
    monkeypatch.setenv("NIGHTLY_K8S_TOKEN", secret)
    monkeypatch.setenv("NIGHTLY_K8S_POLL_S", "0.05")
    seen = _device_suite(nightly_home, tmp_path)
    assert seen["result"].success, seen["stage"].detail
    _assert_pod_request(k8s_api, secret)
    assert {"NIGHTLY_K8S_API_URL", "NIGHTLY_K8S_TOKEN"} <= seen["variables"]
    assert secret not in seen["run_config"]
    assert secret not in seen["events"]


def test_a_pod_killed_by_the_kernel_fails_its_stage_naming_the_pod_and_the_reason(
    cluster_env, nightly_home, tmp_path
):
    cluster_env.use("oomkilled")
    seen = _device_suite(nightly_home, tmp_path)
    assert not seen["result"].success
    stage = seen["stage"]
    (created,) = cluster_env.created()
    pod = created["metadata"]["name"]
    assert stage.status == "failure"
    assert stage.detail.startswith(
        f"PodRunError: torch_spyre/tests_device on 'spyre-aiu': pod torch-spyre-ci/{pod} failed: "
        "container suite exited with 137 (OOMKilled)"
    ), stage.detail
    assert cluster_env.calls()[-1] == "delete"


def test_a_pod_no_node_takes_fails_after_the_schedule_timeout_naming_why(
    cluster_env, nightly_home, tmp_path, monkeypatch
):
    cluster_env.use("unschedulable")
    monkeypatch.setenv("NIGHTLY_K8S_SCHEDULE_TIMEOUT_S", "0.3")
    seen = _device_suite(nightly_home, tmp_path)
    stage = seen["stage"]
    (created,) = cluster_env.created()
    assert stage.status == "failure"
    assert stage.detail.startswith(
        f"PodNotScheduled: pod torch-spyre-ci/{created['metadata']['name']} was not scheduled within 0.3 s "
        "(Unschedulable: 0/6 nodes are available: 3 Insufficient ibm.com/aiu"
    ), stage.detail
    assert "check the runner's node_selector, tolerations and extended_resources" in stage.detail
    calls = cluster_env.calls()
    assert "log" not in calls and calls[-1] == "delete"
    assert set(calls[1:-1]) == {"read"}


def test_an_interrupted_run_deletes_its_pod(cluster_env, nightly_home, tmp_path):
    main = threading.main_thread().ident
    assert main == threading.get_ident()  # the signal goes to the thread that runs the stage
    cluster_env.use("interrupted")
    # The pod runs and its log is being followed: the run is cancelled (Dagster's termination
    # and Ctrl-C both arrive as a signal).
    cluster_env.on_follow = lambda: signal.pthread_kill(main, signal.SIGINT)
    with pytest.raises((KeyboardInterrupt, dg.DagsterExecutionInterruptedError)):
        _device_suite(nightly_home, tmp_path, raise_on_error=True)
    (created,) = cluster_env.created()
    assert cluster_env.calls()[-1] == "delete"
    (pod,) = cluster_env.pods.values()
    assert pod.deleted.is_set() and pod.body["metadata"]["name"] == created["metadata"]["name"]


def test_a_pod_the_node_refuses_fails_at_once_naming_why(cluster_env, nightly_home, tmp_path):
    """Admitted by the scheduler, refused by the kubelet (the card was gone): Failed with no
    container ever started, which the library would wait a day for."""
    cluster_env.use("refused_by_node")
    seen = _device_suite(nightly_home, tmp_path)
    (created,) = cluster_env.created()
    assert seen["stage"].status == "failure"
    assert seen["stage"].detail.startswith(
        f"PodRunError: pod torch-spyre-ci/{created['metadata']['name']} ended before its container "
        "started: UnexpectedAdmissionError: Pod was rejected: Allocate failed"
    ), seen["stage"].detail
    assert cluster_env.calls()[-1] == "delete"


def test_a_container_that_cannot_be_created_fails_after_its_grace_naming_why(
    cluster_env, nightly_home, tmp_path, monkeypatch
):
    """A Secret of `secret_env` missing: CreateContainerConfigError, which the library retries forever."""
    cluster_env.use("missing_secret")
    monkeypatch.setattr(k8s_pipes, "CONFIG_GRACE_S", 0.2)
    seen = _device_suite(nightly_home, tmp_path)
    (created,) = cluster_env.created()
    assert seen["stage"].status == "failure"
    assert seen["stage"].detail.startswith(
        f"PodRunError: pod torch-spyre-ci/{created['metadata']['name']}'s container cannot be created: "
        'container suite is waiting: CreateContainerConfigError: secret "hf-token" not found'
    ), seen["stage"].detail
    assert cluster_env.calls()[-1] == "delete"


def test_a_pod_whose_creation_was_interrupted_is_found_by_its_attempt_label_and_deleted(
    cluster_env, nightly_home, tmp_path
):
    """The run is cancelled while the API stores the pod: the client never learns its name, so
    the pod is found by the attempt's label and deleted, not left holding a card."""
    main = threading.main_thread().ident
    cluster_env.on_create = lambda: signal.pthread_kill(main, signal.SIGINT)
    try:
        with pytest.raises((KeyboardInterrupt, dg.DagsterExecutionInterruptedError)):
            _device_suite(nightly_home, tmp_path, raise_on_error=True)
    finally:
        cluster_env.on_create = None
    (pod,) = cluster_env.pods.values()
    attempt = pod.labels["nightly/attempt"]
    assert pod.deleted.is_set()
    listed = [s for s in cluster_env.requests if s.method == "GET" and "labelSelector" in s.query]
    assert [s.query["labelSelector"] for s in listed] == [[f"nightly/attempt={attempt}"]]
    assert cluster_env.calls()[-1] == "delete"


def _shard_pods(k8s_api) -> dict[str, list[str]]:
    """Each created pod's role (collect, or the tests it was given) -> the pods' node names."""
    roles: dict[str, list[str]] = {}
    for pod in k8s_api.pods.values():
        command = pod.body["spec"]["containers"][0]["command"]
        role = "collect" if "--collect-only" in command else ",".join(c for c in command if "::" in c)
        roles.setdefault(role, []).append(pod.scenario.get("node") or "")
    return roles


def test_a_sharded_suite_runs_a_pod_per_shard_and_reports_one_suite(cluster_env, nightly_home, tmp_path):
    """The suite collected in a pod, then its 2 shards as pods at once (recorded as the planner
    splits the 3 tests): one report of every test once, each shard's pod and node in the manifest,
    and every pod deleted."""
    cluster_env.use("sharded")
    seen = _device_suite(nightly_home, tmp_path, shards=2)
    assert seen["result"].success, seen["stage"].detail
    assert seen["stage"].detail == "2/3 passed; 2 shards"  # as the unsharded pod reports it
    roles = _shard_pods(cluster_env)
    assert sorted(roles) == sorted(
        [
            "collect",
            "tests/test_aiu.py::test_allreduce,tests/test_aiu.py::test_matmul_on_the_card",
            "tests/test_aiu.py::test_conv2d_matches_cpu",
        ]
    )
    assert all(pod.deleted.is_set() for pod in cluster_env.pods.values())
    folder = nightly_home / "artefacts" / "torch_spyre" / "2026-11-04" / "pytorch-pinned" / "tests_device"
    shards = json.loads((folder / "manifest.json").read_text())["shards"]
    assert shards["merge"]["planned"] == 3 and shards["merge"]["not_run"] == 0
    nodes = {s["index"]: [a["node"] for a in s["attempts"]] for s in shards["shards"]}
    assert nodes == {1: ["aiu-worker-1.spyre.example"], 2: ["aiu-worker-3.spyre.example"]}
    assert all(a["pod"].startswith("torch-spyre-ci/") for s in shards["shards"] for a in s["attempts"])


def test_an_evicted_shard_pod_runs_again_alone(cluster_env, nightly_home, tmp_path):
    """The pod of shard 2 is OOM-killed before it reports: that shard alone runs again in a new
    pod (on another node) and the night's report holds every test once; shard 1's pod ran once."""
    cluster_env.use("sharded_one_evicted")
    seen = _device_suite(nightly_home, tmp_path, shards=2)
    assert seen["result"].success, seen["stage"].detail
    assert seen["stage"].detail == "2/3 passed; 2 shards (1 re-run)"
    roles = _shard_pods(cluster_env)
    assert roles["tests/test_aiu.py::test_conv2d_matches_cpu"] == [
        "aiu-worker-2.spyre.example",  # OOM-killed there
        "aiu-worker-3.spyre.example",
    ]
    assert len(roles["tests/test_aiu.py::test_allreduce,tests/test_aiu.py::test_matmul_on_the_card"]) == 1
    folder = nightly_home / "artefacts" / "torch_spyre" / "2026-11-04" / "pytorch-pinned" / "tests_device"
    (second,) = [
        s for s in json.loads((folder / "manifest.json").read_text())["shards"]["shards"] if s["index"] == 2
    ]
    first_try, re_run = second["attempts"]
    assert "OOMKilled" in first_try["lost"] and re_run["lost"] is None
    assert "shard 2/2: lost after" in seen["events"] and "re-running it alone" in seen["events"]


def test_a_shard_pod_lost_on_every_attempt_leaves_its_tests_not_run(cluster_env, nightly_home, tmp_path):
    """Shard 2's pod is OOM-killed each time: its test is reported as not run, never passed, and
    the suite fails; shard 1's results stand."""
    cluster_env.use("sharded_one_always_evicted")
    seen = _device_suite(nightly_home, tmp_path, shards=2)
    assert not seen["result"].success
    assert seen["stage"].status == "failure"
    assert "1 of 3 planned tests did not run" in (seen["stage"].detail or ""), seen["stage"].detail
    with dg.build_resources({"warehouse": resources_for("local", nightly_home)["warehouse"]}) as resolved:
        cases = {c.node_id: c for c in resolved.warehouse.store().test_cases(NIGHT, "tests_device")}
    lost = cases["tests.test_aiu::test_conv2d_matches_cpu"]
    assert lost.outcome == "skipped" and (lost.message or "").startswith("not run: shard 2 of 2 was lost")
    assert cases["tests.test_aiu::test_matmul_on_the_card"].outcome == "passed"


def test_an_interrupted_sharded_suite_deletes_every_shard_pod(cluster_env, nightly_home, tmp_path):
    """Both shards' pods run and are followed when the run is cancelled: the stage's thread stops
    the shards, and each shard's pod is deleted (none holds a card until its deadline)."""
    main = threading.main_thread().ident
    cluster_env.use("sharded_interrupted")
    followed = []

    def on_follow() -> None:
        followed.append(1)
        if len(followed) == 2:  # both shards' pods are running
            signal.pthread_kill(main, signal.SIGINT)

    cluster_env.on_follow = on_follow
    with pytest.raises((KeyboardInterrupt, dg.DagsterExecutionInterruptedError)):
        _device_suite(nightly_home, tmp_path, raise_on_error=True, shards=2)
    shard_pods = [p for p in cluster_env.pods.values() if "--collect-only" not in json.dumps(p.body)]
    assert len(shard_pods) == 2 and all(pod.deleted.is_set() for pod in shard_pods)
