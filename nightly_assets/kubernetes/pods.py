"""The pod a kubernetes runner's work runs in, built from the runner's placement (runners.yaml).

`PodSpecBuilder` gives PipesK8sClient its `base_pod_meta` and `base_pod_spec` (the client adds the
pod's name, image, command and the Pipes variables); `manifest` is the whole pod as the client sends
it, for the schema tests. Secrets appear by name only: `secretKeyRef`s and `imagePullSecrets`; the
pod gets no service account token and no service links.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes  # type: ignore[import-untyped]
from dagster_k8s.pipes import build_pod_body

from nightly_assets.containers.runner import OUT_DIR, TOOLS_DIR, tools_archive
from nightly_assets.kubernetes.models import KubernetesPlacement

CONTAINER = "suite"
TOOLS_ENV = "NIGHTLY_PIPES_TOOLS"
LABEL_PREFIX = "nightly"
# The docker runner copies the entry script in before the container starts; a pod cannot be written
# to, so its command unpacks the tools from the environment first, then runs the same command.
BOOTSTRAP = (
    "import base64, io, os, sys, tarfile\n"
    "options = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}\n"
    f"tools = io.BytesIO(base64.b64decode(os.environ['{TOOLS_ENV}']))\n"
    "with tarfile.open(fileobj=tools, mode='r:gz') as tar:\n"
    "    tar.extractall('/', **options)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)
# Extra time the pod gets past the work's own timeout before the kubelet stops it.
DEADLINE_MARGIN_S = 300


class PodSpecBuilder:
    """The pods of one kubernetes runner label."""

    def __init__(self, label: str, placement: KubernetesPlacement):
        self.label = label
        self.placement = placement

    def command(self, entry_command: Sequence[str]) -> list[str]:
        """The container's command: unpack the entry script, then run `entry_command` (the command
        the docker runner runs: the image's Python, the entry script, its arguments)."""
        python, *arguments = entry_command
        return [python, "-c", BOOTSTRAP, *arguments]

    def metadata(self, labels: Mapping[str, str]) -> dict[str, Any]:
        """Labels that find the pod again: the runner, and the night's `labels` (pipeline, stage...)."""
        ours = {f"{LABEL_PREFIX}/{key}": value for key, value in labels.items()}
        return {"labels": {**self.placement.labels, **ours, f"{LABEL_PREFIX}/runner": self.label}}

    def spec(self, timeout_s: float) -> dict[str, Any]:
        """The pod spec: placement, resources, secrets by name, and a deadline past `timeout_s`."""
        placement = self.placement
        cards = {name: str(count) for name, count in placement.extended_resources.items()}
        resources: dict[str, Any] = {}
        if cards or placement.requests:
            resources["requests"] = {**placement.requests, **cards}
        if cards or placement.limits:
            resources["limits"] = {**placement.limits, **cards}
        env: list[dict[str, Any]] = [
            {"name": TOOLS_ENV, "value": base64.b64encode(tools_archive(compress=True)).decode("ascii")}
        ]
        env += [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
            for name, ref in placement.secret_env.items()
        ]
        container: dict[str, Any] = {
            "name": CONTAINER,
            "imagePullPolicy": placement.image_pull_policy,
            "env": env,
            "resources": resources,
            "volumeMounts": [
                {"name": "nightly-tools", "mountPath": TOOLS_DIR},
                {"name": "nightly-out", "mountPath": OUT_DIR},
            ],
        }
        spec: dict[str, Any] = {
            "containers": [container],
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(timeout_s) + DEADLINE_MARGIN_S,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "volumes": [
                {"name": "nightly-tools", "emptyDir": {}},
                {"name": "nightly-out", "emptyDir": {}},
            ],
        }
        if placement.node_selector:
            spec["nodeSelector"] = dict(placement.node_selector)
        if placement.tolerations:
            spec["tolerations"] = [t.manifest() for t in placement.tolerations]
        if placement.service_account:
            spec["serviceAccountName"] = placement.service_account
        if placement.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": name} for name in placement.image_pull_secrets]
        return spec

    def manifest(
        self,
        *,
        name: str,
        image: str,
        entry_command: Sequence[str],
        env: Mapping[str, str],
        labels: Mapping[str, str],
        timeout_s: float,
    ) -> dict[str, Any]:
        """The whole pod as PipesK8sClient sends it (its own `build_pod_body`), as JSON."""
        pod = build_pod_body(
            pod_name=name,
            image=image,
            command=self.command(entry_command),
            env_vars=dict(env),
            base_pod_meta=self.metadata(labels),
            base_pod_spec=self.spec(timeout_s),
        )
        body: dict[str, Any] = kubernetes.client.ApiClient().sanitize_for_serialization(pod)
        return {"apiVersion": "v1", "kind": "Pod", **body}
