"""The cluster the kubernetes runners' pods run on.

One of three ways in: a kubeconfig (path and context), the orchestrator's own service account when
it runs in the cluster, or an API server URL with a bearer token. The token is a `dg.EnvVar`: run
config and the UI show the variable's name; its value reaches the API client's header only, never a
log line, the metadata or a pod spec. Without a cluster (local mode), `stand_in: docker` runs each
pod's container on the runner pool's Docker engine instead, as the docker runner kind would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import dagster as dg
from pydantic import Field

from nightly_assets.settings import FromEnv, PositiveSeconds, one_of

# The kubernetes client and dagster-k8s are imported where a cluster is used, not when the code
# location loads: local mode's stand-in and hosts without a cluster never need them.
if TYPE_CHECKING:
    from nightly_assets.kubernetes.pipes import NightlyPipesK8sClient

# The variables that say where the cluster is (resources.py wires each to its field).
KUBECONFIG_VAR = "NIGHTLY_K8S_KUBECONFIG"
CONTEXT_VAR = "NIGHTLY_K8S_CONTEXT"
IN_CLUSTER_VAR = "NIGHTLY_K8S_IN_CLUSTER"
API_URL_VAR = "NIGHTLY_K8S_API_URL"
TOKEN_VAR = "NIGHTLY_K8S_TOKEN"  # noqa: S105  # a variable's name
CA_CERT_VAR = "NIGHTLY_K8S_CA_CERT"
CLUSTER_VARS = (KUBECONFIG_VAR, CONTEXT_VAR, IN_CLUSTER_VAR, API_URL_VAR)


class KubernetesConfigError(ValueError):
    """The cluster settings contradict each other or cannot be loaded; the message names them."""


class KubernetesClusterResource(dg.ConfigurableResource):
    """Where kubernetes runners' pods are created, and how long they may wait for a node."""

    kubeconfig: str | None = Field(
        default=None, description=f"kubeconfig path ({KUBECONFIG_VAR}); None: KUBECONFIG or ~/.kube/config"
    )
    context: str | None = Field(default=None, description=f"the kubeconfig's context ({CONTEXT_VAR})")
    in_cluster: Annotated[bool, FromEnv] = Field(
        default=False, description=f"use the pod's service account ({IN_CLUSTER_VAR})"
    )
    api_url: str | None = Field(default=None, description=f"API server URL ({API_URL_VAR}), with `token`")
    token: str | None = Field(
        default=None, description=f"bearer token for api_url: give it as {{env: {TOKEN_VAR}}}, never inline"
    )
    ca_cert: str | None = Field(
        default=None, description=f"CA bundle of api_url's certificate ({CA_CERT_VAR})"
    )
    poll_interval_s: PositiveSeconds = Field(default="5", description="between pod status reads")
    schedule_timeout_s: PositiveSeconds = Field(
        default="1800",
        description="how long a pod may stay unscheduled (no free cards) before its stage fails",
    )
    stand_in: Annotated[str, one_of("none", "docker"), FromEnv] = Field(
        default="none", description="docker: no cluster; run the pods' containers on the runner pool's engine"
    )

    def connection(self) -> str:
        """How the cluster is reached, in words (no credentials); contradicting settings are named."""
        if self.api_url and (self.kubeconfig or self.context or self.in_cluster):
            raise KubernetesConfigError(
                f"api_url ({API_URL_VAR}) and a kubeconfig or in_cluster ({KUBECONFIG_VAR}, {CONTEXT_VAR}, "
                f"{IN_CLUSTER_VAR}) both say where the cluster is: set one"
            )
        if self.in_cluster and (self.kubeconfig or self.context):
            raise KubernetesConfigError(
                f"in_cluster ({IN_CLUSTER_VAR}) uses the pod's service account: leave {KUBECONFIG_VAR} "
                f"and {CONTEXT_VAR} unset"
            )
        if self.token and not self.api_url:
            raise KubernetesConfigError(
                f"token ({TOKEN_VAR}) goes with api_url ({API_URL_VAR}); a kubeconfig carries its own "
                "credentials"
            )
        if self.api_url:
            return f"{self.api_url} ({'a bearer token from ' + TOKEN_VAR if self.token else 'no token'})"
        if self.in_cluster:
            return "the in-cluster service account"
        where = self.kubeconfig or "KUBECONFIG or ~/.kube/config"
        return f"kubeconfig {where}" + (f", context {self.context}" if self.context else "")

    def configure(self) -> None:
        """Point the kubernetes client's default configuration at the cluster (what the client of
        PipesK8sClient reads)."""
        import kubernetes  # type: ignore[import-untyped]

        self.connection()
        try:
            if self.api_url:
                configuration = kubernetes.client.Configuration()
                configuration.host = self.api_url.rstrip("/")
                if self.token:  # the header's form every client version takes ('authorization')
                    configuration.api_key = {"authorization": f"Bearer {self.token}"}
                if self.ca_cert:
                    configuration.ssl_ca_cert = self.ca_cert
                kubernetes.client.Configuration.set_default(configuration)
            elif self.in_cluster:
                kubernetes.config.load_incluster_config()
            else:
                kubernetes.config.load_kube_config(config_file=self.kubeconfig, context=self.context)
        except (kubernetes.config.ConfigException, OSError) as exc:
            raise KubernetesConfigError(f"the cluster at {self.connection()} cannot be used: {exc}") from None

    def pipes_client(self) -> NightlyPipesK8sClient:
        from nightly_assets.kubernetes.pipes import NightlyPipesK8sClient

        return NightlyPipesK8sClient(
            self.configure,
            poll_interval_s=float(self.poll_interval_s),
            schedule_timeout_s=float(self.schedule_timeout_s),
        )
