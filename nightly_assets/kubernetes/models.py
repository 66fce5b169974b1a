"""Where a kubernetes runner's pods go: the `kubernetes:` block of a runners.yaml entry, typed, each
field checked with the rule the API server would apply (so a bad entry fails when the catalog
loads, naming the runner label and the field, not at night when the pod is refused)."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r}: expected a DNS label (lowercase letters, digits and '-', at most 63, "
            "starting and ending with a letter or digit)"
        )
    return value


def _dns_subdomain(value: str) -> str:
    if len(value) > 253 or not all(_DNS_LABEL.match(part) for part in value.split(".")):
        raise ValueError(f"{value!r}: expected a DNS subdomain (DNS labels joined by '.', at most 253)")
    return value


def _label_key(value: str) -> str:
    """A label or taint key: an optional DNS subdomain prefix and '/', then a name of at most 63."""
    prefix, _, name = value.rpartition("/")
    if prefix:
        try:
            _dns_subdomain(prefix)
        except ValueError:
            raise ValueError(f"{value!r}: the prefix before '/' must be a DNS subdomain") from None
    if len(name) > 63 or not _NAME_PART.match(name):
        raise ValueError(
            f"{value!r}: expected [prefix/]name, the name at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def _label_value(value: str) -> str:
    if value and (len(value) > 63 or not _NAME_PART.match(value)):
        raise ValueError(
            f"{value!r}: expected a label value (at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit)"
        )
    return value


def _extended_resource(value: str) -> str:
    """An extended resource: fully qualified, outside the kubernetes.io domain (ibm.com/aiu)."""
    domain, slash, name = value.partition("/")
    if not slash or not domain or not name:
        raise ValueError(
            f"{value!r}: expected a fully qualified extended resource name, domain/name "
            "(e.g. ibm.com/aiu, nvidia.com/gpu, amd.com/gpu)"
        )
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise ValueError(f"{value!r}: the kubernetes.io domain holds no extended resources")
    _label_key(value)
    return value


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r}: expected a Kubernetes quantity such as 500m, 4, 16Gi or 1.5")
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError(f"{value!r}: expected an environment variable name (letters, digits, '_', '-', '.')")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
ExtendedResource = Annotated[str, AfterValidator(_extended_resource)]
Quantity = Annotated[str, AfterValidator(_quantity)]
EnvName = Annotated[str, AfterValidator(_env_name)]
NativeResource = Literal["cpu", "memory", "ephemeral-storage"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Toleration(_Strict):
    """A taint the runner's pods tolerate (the AIU nodes are tainted so that only they land there)."""

    key: LabelKey | None = None  # None with operator Exists: every taint
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None  # None: every effect
    toleration_seconds: int | None = Field(default=None, ge=0)  # NoExecute only

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("value: operator Exists matches any value; leave 'value' out")
        if self.operator == "Equal" and self.key is None:
            raise ValueError("key: operator Equal needs the taint's key")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("toleration_seconds: only a NoExecute toleration takes it")
        return self

    def manifest(self) -> dict[str, object]:
        """As the API takes it (camelCase, unset fields left out)."""
        fields = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {k: v for k, v in fields.items() if v is not None}


class SecretRef(_Strict):
    """An environment variable of the pod read from a Secret the cluster holds: the pod spec names
    the Secret and its key, never the value."""

    secret: DnsSubdomain
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]


class KubernetesPlacement(_Strict):
    """A kubernetes runner's pods: namespace, the nodes they may land on, what they request."""

    namespace: DnsLabel
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    # Accelerator cards and other extended resources, whole units (requests = limits).
    extended_resources: dict[ExtendedResource, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    requests: dict[NativeResource, Quantity] = Field(default_factory=dict)
    limits: dict[NativeResource, Quantity] = Field(default_factory=dict)
    service_account: DnsSubdomain | None = None
    image_pull_secrets: list[DnsSubdomain] = Field(default_factory=list)  # Secret names
    secret_env: dict[EnvName, SecretRef] = Field(default_factory=dict)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"

    def devices(self) -> int:
        """The accelerator cards a pod of this runner gets (the extended resources' units)."""
        return sum(self.extended_resources.values())
