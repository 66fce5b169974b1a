"""The kubernetes runner kind: suites and commands in the night's image as pods, through dagster-k8s's
`PipesK8sClient`, placed by the runner's `kubernetes:` block in runners.yaml (namespace, node
selector, tolerations, extended resources such as `ibm.com/aiu`). The Dagster pool the runner holds
still limits how many run at once.

Without a cluster (`stand_in: docker`, local mode's default) the same work runs in the image on the
runner pool's Docker engine, as the docker kind runs it. Wheels are not built in pods: a pod cannot
be handed the checkout; a wheels stage names a local or docker runner.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly_assets.kubernetes.models import KubernetesPlacement
from nightly_assets.kubernetes.resources import KubernetesClusterResource
from nightly_assets.runners import docker
from nightly_assets.runners.protocol import Capability, RunnerBackend, StageWork, SuiteOutcome
from nightly_assets.stages import StageNotAvailable, StageSpec

# Every runner kind's module is imported when the code location loads (runners.backends()); the
# pod modules import the kubernetes client and dagster-k8s, so they wait until a pod is made.
if TYPE_CHECKING:
    from nightly_assets.kubernetes.pipes import PodRun

CLUSTER_RESOURCE = "kubernetes"


class KubernetesBackend(RunnerBackend):
    kind = "kubernetes"
    supports = frozenset({"suite", "command"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        # The Docker resources serve the stand-in (no cluster: the runner pool's engine).
        return {CLUSTER_RESOURCE} | docker.IMAGE_RESOURCES

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        if not work.in_image:
            raise self.unsupported(work, "a suite outside an image", "a pod runs the night's image")
        cluster: KubernetesClusterResource = work.resources.kubernetes
        if cluster.stand_in == "docker":
            work.context.log.info(f"no cluster (stand_in: docker): '{work.label}' runs on the Docker engine")
            outcome = docker.BACKEND.run_suite(work)
            outcome.metadata["kubernetes/stand_in"] = "docker"
            return outcome
        from nightly_assets.kubernetes.pipes import PodRunError

        pods: list[PodRun] = []
        run_in = functools.partial(run_in_pod, work, pods)
        gpus, suite = placement_of(work).devices(), work.spec.stage.suite
        # Shards are pods at once, each asking for its own cards: the cluster places them on its
        # nodes, and one that no node can take yet stays pending until a card is free.
        sharded = (
            docker.image_shards(work, gpus, run_in, lost=(PodRunError,), cards_bound=False)
            if suite and suite.sharded
            else None
        )
        report = sharded.report if sharded is not None else docker.image_suite(work, gpus, run_in)
        # The suite's pod is the one its metadata names; a re-run's pods are not added to it.
        rerunner = docker.image_rerunner(work, functools.partial(run_in_pod, work, []))
        metadata = pod_metadata(pods) if sharded is None else {}  # a shard's pod is in the shard table
        return SuiteOutcome(report, metadata, rerunner, shards=sharded)

    def run_command(self, work: StageWork, argv: list[str], output: str, timeout_s: float) -> Path:
        if not work.in_image:
            raise self.unsupported(work, "a command outside an image", "a pod runs the night's image")
        cluster: KubernetesClusterResource = work.resources.kubernetes
        if cluster.stand_in == "docker":
            return docker.command_in_image(work, argv, output, timeout_s)
        pods: list[PodRun] = []
        path = docker.image_command(work, argv, output, timeout_s, functools.partial(run_in_pod, work, pods))
        work.run.manifest.update(pod_metadata(pods))
        return path


def placement_of(work: StageWork) -> KubernetesPlacement:
    runner = work.run.runner
    assert runner is not None and runner.kubernetes is not None  # the catalog requires the block
    return runner.kubernetes


def pod_image(work: StageWork) -> str:
    """The night's image as the cluster pulls it: from the registry the image stage pushed it to."""
    environment = work.env
    if environment.primary_registry is None:
        raise StageNotAvailable(
            f"{work.spec.key.to_user_string()}: the night's image {environment.reference} was pushed to no "
            f"registry, and the pods of '{work.label}' pull from one: give the image stage `push_to`"
        )
    return str(environment.reference)


def run_in_pod(
    work: StageWork,
    pods: list[PodRun],
    *,
    pytest_args: list[str] | None = None,
    collect_only: bool = False,
    program: list[str] | None = None,
    timeout_s: float,
    env: dict[str, str] | None = None,
    out_dir: Path | None = None,
    on_stop: Callable[[Callable[[], None]], None] | None = None,
) -> PodRun:
    """A suite (or `program`) in the night's image as a pod of the work's runner; outputs land in
    `out_dir` (default run.workdir/out). The pod is appended to `pods` for the metadata; `on_stop`
    is told how to delete it (a shard's pod, when the night is interrupted)."""
    from nightly_assets.containers.runner import program_command, suite_command
    from nightly_assets.kubernetes.pods import PodSpecBuilder

    context, environment, run = work.context, work.env, work.run
    cluster: KubernetesClusterResource = work.resources.kubernetes
    placement = placement_of(work)
    image = pod_image(work)
    python, rootdir = environment.python, str(environment.rootdir)
    if program is not None:
        command = program_command(python, rootdir, program, timeout_s, report_files=True)
    else:
        command = suite_command(
            python, rootdir, pytest_args or [], timeout_s, collect_only, report_files=True
        )
    builder = PodSpecBuilder(work.label, placement)
    labels = {
        "pipeline": work.spec.pipeline.name,
        "stage": work.spec.stage.name,
        "target": run.target.name,
        "night": run.key.night.isoformat(),
    }
    context.log.info(
        f"running {image} as a pod of '{work.label}' in namespace {placement.namespace} on "
        f"{cluster.connection()}: {' '.join(command[2:])}"
    )
    client = cluster.pipes_client()
    if on_stop is not None:
        on_stop(functools.partial(client.stop, context))
    result = client.run_pod(
        context=context,
        image=image,
        command=builder.command(command),
        namespace=placement.namespace,
        env=env or {},
        base_pod_meta=builder.metadata(labels),
        base_pod_spec=builder.spec(timeout_s),
        out_dir=out_dir or run.workdir / "out",
        where=f"{work.spec.key.to_user_string()} on '{work.label}'",
    )
    pods.append(result)
    return result


def pod_metadata(pods: list[PodRun]) -> dict[str, Any]:
    if not pods:
        return {}
    pod = pods[-1]
    return {
        "kubernetes/pod": pod.pod,
        "kubernetes/namespace": pod.namespace,
        "kubernetes/node": pod.node or "",
        "kubernetes/pod_deleted": pod.deleted,
    }


BACKEND = KubernetesBackend()
