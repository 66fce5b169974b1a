"""Run one piece of work as a pod through dagster-k8s's `PipesK8sClient`.

The library creates the pod (its `build_pod_body` over our base spec), follows its log for the Pipes
messages and waits for it to end. This subclass adds what a nightly runner needs: the cluster
connection the resource configures, a bounded wait for the pod to be scheduled (an AIU pod that no
node takes fails the stage, naming why, instead of waiting for a day), the output files sent back as
Pipes messages (a pod's files cannot be copied out), a failure that names the pod and the reason the
cluster gives, and the pod deleted at the end whatever happened, interruption included.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import dagster as dg
import kubernetes  # type: ignore[import-untyped]
import urllib3
from dagster._core.pipes.context import PipesMessageHandler
from dagster_k8s.client import DagsterK8sError, DagsterKubernetesClient
from dagster_k8s.pipes import PipesK8sClient, PipesK8sPodLogsMessageReader
from dagster_k8s.utils import apply_no_proxy_env_workaround
from dagster_pipes import PIPES_PROTOCOL_VERSION_FIELD
from kubernetes.client import ApiException  # type: ignore[import-untyped]

from nightly_assets.containers.runner import SuiteRun, read_result
from nightly_assets.kubernetes.pods import CONTAINER, LABEL_PREFIX

ATTEMPT_LABEL = f"{LABEL_PREFIX}/attempt"

# A container waiting for these is not going to start by itself (the library retries forever).
_CONFIG_ERRORS = {"CreateContainerConfigError", "CreateContainerError", "InvalidImageName"}
_STARTING = {"ContainerCreating", "PodInitializing"}
CONFIG_GRACE_S = 60.0  # a Secret created a moment late still counts


class PodRunError(RuntimeError):
    """The pod could not run the work (not: some tests failed)."""


class PodNotScheduled(PodRunError):
    """No node took the pod in time (Unschedulable: no free cards, a selector no node matches)."""


@dataclass
class PodRun(SuiteRun):
    """A suite's (or command's) run in a pod: what the docker runner returns, and the pod."""

    pod: str = ""
    namespace: str = ""
    node: str | None = None
    deleted: bool = False

    def where(self) -> dict[str, str]:
        return {"pod": f"{self.namespace}/{self.pod}", "node": self.node or ""}


class FileShippingLogsReader(PipesK8sPodLogsMessageReader):
    """Reads the Pipes messages from the pod's log, keeping the file parts the entry script sends
    (`--report-files`) instead of handing them to Dagster as custom messages."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, dict[int, str]] = {}
        self.expected: dict[str, int] = {}

    @contextmanager
    def read_messages(self, handler: PipesMessageHandler) -> Iterator[dict[str, Any]]:
        with super().read_messages(cast(PipesMessageHandler, _FileTap(handler, self))) as params:
            yield dict(params)

    def keep(self, payload: Mapping[str, Any]) -> None:
        name = Path(str(payload["nightly_file"])).name  # flat: nothing from the pod escapes out_dir
        self.expected[name] = int(payload["parts"])
        self.parts.setdefault(name, {})[int(payload["part"])] = str(payload["gzip_base64"])

    def write_files(self, out_dir: Path) -> tuple[list[Path], list[str]]:
        """The files whose every part arrived, written to `out_dir`; and what did not come back
        whole, named with why (parts missing, a damaged part)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        written, broken = [], []
        for name, parts in sorted(self.parts.items()):
            if len(parts) != self.expected[name]:
                broken.append(f"{name}: {len(parts)} of {self.expected[name]} part(s) came back")
                continue
            data = "".join(parts[i] for i in range(self.expected[name]))
            try:
                (out_dir / name).write_bytes(gzip.decompress(base64.b64decode(data)))
            except (ValueError, OSError, EOFError) as exc:  # binascii.Error is a ValueError
                broken.append(f"{name}: damaged in transfer ({exc})")
                continue
            written.append(out_dir / name)
        return written, broken


class _FileTap:
    """The session's message handler, but for the file parts."""

    def __init__(self, handler: PipesMessageHandler, reader: FileShippingLogsReader):
        self._handler = handler
        self._reader = reader

    def handle_message(self, message: Any) -> None:
        if PIPES_PROTOCOL_VERSION_FIELD in message and message.get("method") == "report_custom_message":
            payload = (message.get("params") or {}).get("payload")
            if isinstance(payload, dict) and "nightly_file" in payload:
                self._reader.keep(payload)
                return
        self._handler.handle_message(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handler, name)


class NightlyPipesK8sClient(PipesK8sClient):
    """`PipesK8sClient` on the configured cluster, one pod per call of `run_pod`."""

    def __init__(self, configure: Callable[[], None], *, poll_interval_s: float, schedule_timeout_s: float):
        super().__init__(message_reader=FileShippingLogsReader(), poll_interval=poll_interval_s)
        self._configure = configure
        self.schedule_timeout_s = schedule_timeout_s
        self._core_api: Any = None
        self._pod: str | None = None
        self._node: str | None = None
        self._context: dg.AssetExecutionContext | None = None
        self._where: tuple[str, str] | None = None  # the namespace and attempt label of the pod run now
        self._stopped = threading.Event()

    def _load_k8s_config(self) -> None:
        self._configure()
        apply_no_proxy_env_workaround()

    @contextmanager
    def consume_pod_logs(  # type: ignore[override]
        self,
        context: dg.AssetExecutionContext,
        client: DagsterKubernetesClient,
        namespace: str,
        pod_name: str,
        enable_multi_container_logs: bool = False,
        ignore_containers: set | None = None,
    ) -> Iterator[None]:
        # The library calls this right after it created the pod: from here on the pod is ours to delete.
        self._core_api, self._pod = client.core_api, pod_name
        # The library's waits poll through its sleeper: a stopped run ends there (a deleted pod
        # reads as "not launched yet" to it, which it would wait for until its launch timeout).
        client.sleeper = self._sleep
        self._node = self._wait_until_started(context, namespace, pod_name)
        with super().consume_pod_logs(
            context, client, namespace, pod_name, enable_multi_container_logs, ignore_containers
        ):
            yield

    def run_pod(
        self,
        *,
        context: dg.AssetExecutionContext,
        image: str,
        command: Sequence[str],
        namespace: str,
        env: Mapping[str, str],
        base_pod_meta: Mapping[str, Any],
        base_pod_spec: Mapping[str, Any],
        out_dir: Path,
        where: str,
    ) -> PodRun:
        """Run the pod to its end; its files land in `out_dir`. A pod that failed before the entry
        script reported (result.json) raises PodRunError naming the pod and the cluster's reason."""
        reader = self.message_reader
        assert isinstance(reader, FileShippingLogsReader)
        started = time.monotonic()
        # Finds the pod even when its creation was interrupted before its name came back.
        attempt = secrets.token_hex(8)
        self._where = (namespace, attempt)
        labels = {**base_pod_meta.get("labels", {}), ATTEMPT_LABEL: attempt}
        base_pod_meta = {**base_pod_meta, "labels": labels}
        deadline = float(base_pod_spec.get("activeDeadlineSeconds") or 0)
        invocation = None
        failure: str | None = None
        deleted = False
        try:
            invocation = self.run(
                context=context,
                image=image,
                command=list(command),
                namespace=namespace,
                env=dict(env),
                base_pod_meta=base_pod_meta,
                base_pod_spec=base_pod_spec,
                pod_wait_timeout=deadline + 300 if deadline else 0,
                delete_pod_on_completion=False,  # below, once the reason of a failure is read
            )
        except DagsterK8sError as exc:
            failure = self._why(namespace, str(exc))
        except ApiException as exc:
            if self._pod is None:
                raise PodRunError(
                    f"{where}: the cluster refused the pod in namespace '{namespace}': {_api_error(exc)}"
                ) from None
            failure = f"the API answered {_api_error(exc)}"
        finally:
            if self._pod is not None:
                deleted = self._delete(context, namespace, self._pod)
            else:
                self._delete_attempt(context, namespace, attempt)
        files, broken = reader.write_files(out_dir)
        if broken:
            context.log.error(
                f"files of pod {namespace}/{self._pod} lost on the way back: {'; '.join(broken)}"
            )
        result = read_result(out_dir)
        pod = f"pod {namespace}/{self._pod}"
        if failure is not None and not result:
            raise PodRunError(f"{where}: {pod} failed: {failure}")
        if failure is not None:
            context.log.warning(f"{pod} ended badly after the work reported: {failure}")
        context.log.info(f"{pod} on node {self._node}: {len(files)} file(s) back")
        return PodRun(
            returncode=int(result.get("returncode", -1)),
            timed_out=bool(result.get("timed_out")),
            duration_s=float(result.get("duration_s", time.monotonic() - started)),
            out_dir=out_dir,
            invocation=invocation,
            pod=str(self._pod),
            namespace=namespace,
            node=self._node,
            deleted=deleted,
        )

    def _sleep(self, seconds: float) -> None:
        if self._stopped.wait(seconds):
            raise DagsterK8sError("the night was interrupted: the pod was deleted")

    def stop(self, context: dg.AssetExecutionContext) -> None:
        """Delete the pod this client runs now (from another thread: the night was interrupted), so
        that the run waiting on it ends and no card stays held until its deadline."""
        self._stopped.set()
        if self._where is None:
            return
        namespace, attempt = self._where
        if self._pod is not None:
            self._delete(context, namespace, self._pod)
        else:
            self._delete_attempt(context, namespace, attempt)

    def _wait_until_started(self, context: dg.AssetExecutionContext, namespace: str, name: str) -> str | None:
        """The node the pod runs on, once its container runs (or ended, or waits on an image pull,
        which the library reports). PodNotScheduled when no node took it in time; PodRunError when
        the node refused it (no container ever started) or its container cannot be created (a
        Secret or key of `secret_env` missing) for CONFIG_GRACE_S: the library would wait a day."""
        deadline = time.monotonic() + self.schedule_timeout_s
        said = ""
        config_error_since: float | None = None
        while True:
            pod = self._core_api.read_namespaced_pod(name, namespace)
            status = pod.status
            scheduled = next((c for c in status.conditions or [] if c.type == "PodScheduled"), None)
            if status.phase in ("Failed", "Succeeded") and not status.container_statuses:
                raise PodRunError(
                    f"pod {namespace}/{name} ended before its container started: "
                    f"{describe_pod(pod) or status.phase}"
                )
            if status.phase != "Pending" or (scheduled is not None and scheduled.status == "True"):
                waiting = _waiting_reason(status)
                if waiting not in _CONFIG_ERRORS and waiting not in _STARTING:
                    return pod.spec.node_name if pod.spec else None
                if waiting in _CONFIG_ERRORS:
                    config_error_since = config_error_since or time.monotonic()
                    if time.monotonic() - config_error_since > CONFIG_GRACE_S:
                        raise PodRunError(
                            f"pod {namespace}/{name}'s container cannot be created: {describe_pod(pod)}; "
                            "check the runner's secret_env and image against the namespace"
                        )
                self._sleep(self.poll_interval)
                continue
            why = (
                f"{scheduled.reason}: {scheduled.message}"
                if scheduled is not None and scheduled.reason
                else ""
            )
            if why and why != said:
                context.log.info(f"pod {namespace}/{name} is pending: {why}")
                said = why
            left = deadline - time.monotonic()
            if left <= 0:
                raise PodNotScheduled(
                    f"pod {namespace}/{name} was not scheduled within {self.schedule_timeout_s:g} s "
                    f"({why or 'no node took it'}); check the runner's node_selector, tolerations and "
                    "extended_resources against the cluster's nodes"
                )
            self._sleep(min(self.poll_interval, left))

    def _why(self, namespace: str, library_error: str) -> str:
        """Why the pod failed, as its status says (reasons, exit codes), and its last output lines."""
        first_line = library_error.strip().splitlines()[0] if library_error.strip() else "unknown"
        try:
            pod = self._core_api.read_namespaced_pod(self._pod, namespace)
        except ApiException:
            return first_line
        reasons = describe_pod(pod) or first_line
        tail = self._output_tail(namespace)
        return reasons + (f"; last output:\n{tail}" if tail else "")

    def _output_tail(self, namespace: str, lines: int = 30) -> str:
        """The pod's last log lines that are not Pipes messages (a traceback, the kubelet's words)."""
        try:
            response = self._core_api.read_namespaced_pod_log(
                self._pod, namespace, container=CONTAINER, tail_lines=lines * 4, _preload_content=False
            )
        except ApiException:
            return ""
        kept = [line for line in response.data.decode("utf-8", "replace").splitlines() if not _is_pipes(line)]
        return "\n".join(kept[-lines:])

    def _delete_attempt(self, context: dg.AssetExecutionContext, namespace: str, attempt: str) -> None:
        """Delete the pods of this attempt the client never learned the name of (an interrupt or an
        error while it was being created): none must hold a card until its deadline."""
        try:
            core = self._core_api or kubernetes.client.CoreV1Api()
            found = core.list_namespaced_pod(namespace, label_selector=f"{ATTEMPT_LABEL}={attempt}")
            names = [pod.metadata.name for pod in found.items]
        except (
            ApiException,
            OSError,
            urllib3.exceptions.HTTPError,
            kubernetes.config.ConfigException,
        ) as exc:
            context.log.error(f"pods of attempt {attempt} in {namespace} could not be looked for: {exc}")
            return
        self._core_api = core
        for name in names:
            self._delete(context, namespace, name)

    def _delete(self, context: dg.AssetExecutionContext, namespace: str, name: str) -> bool:
        try:
            self._core_api.delete_namespaced_pod(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status == 404:
                return True
            context.log.error(f"pod {namespace}/{name} could not be deleted: {_api_error(exc)}")
            return False
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # never raised over the stage's own error
            context.log.error(f"pod {namespace}/{name} could not be deleted (API unreachable): {exc}")
            return False
        context.log.info(f"pod {namespace}/{name} deleted")
        return True


def describe_pod(pod: Any) -> str:
    """A failed pod's reasons: the pod's own (DeadlineExceeded, Evicted), then each container's."""
    status = pod.status
    parts = []
    if status.reason:
        parts.append(status.reason + (f": {status.message}" if status.message else ""))
    for container in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        state = container.state
        if state.terminated is not None and state.terminated.exit_code != 0:
            ended = state.terminated
            parts.append(
                f"container {container.name} exited with {ended.exit_code} ({ended.reason or 'Error'}"
                + (f": {ended.message.strip()}" if ended.message else "")
                + ")"
            )
        elif state.waiting is not None and state.waiting.reason:
            waiting = state.waiting
            parts.append(
                f"container {container.name} is waiting: {waiting.reason}"
                + (f": {waiting.message}" if waiting.message else "")
            )
    return "; ".join(parts)


def _waiting_reason(status: Any) -> str:
    """Why the pod's first waiting container waits ("" when none waits)."""
    for container in status.container_statuses or []:
        if container.state is not None and container.state.waiting is not None:
            return str(container.state.waiting.reason or "")
    return ""


def _is_pipes(line: str) -> bool:
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and PIPES_PROTOCOL_VERSION_FIELD in message


def _api_error(exc: ApiException) -> str:
    """`403 Forbidden: <the API's message>` (the Status body's message, not the whole response)."""
    message = ""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
