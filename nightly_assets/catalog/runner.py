"""A runner of runners.yaml: a place tests and builds run, of one runner kind, with its pool,
GPUs and what the tested code on it inherits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from nightly_assets.builds.framework_stack import check_base_python
from nightly_assets.catalog.fields import Arch, StrictModel
from nightly_assets.catalog.kinds import RunnerKind
from nightly_assets.kubernetes.models import KubernetesPlacement
from nightly_assets.process import GPU_VARIABLES, secret_variable_problem


class Runner(StrictModel):
    """A place tests and builds run: a runner label of the seeds mapped to a kind and a pool."""

    kind: RunnerKind
    arch: Arch = "amd64"
    gpus: int | Literal["auto"] = 0
    pool: str | None = None
    description: str = ""
    kubernetes: KubernetesPlacement | None = None  # kind kubernetes: where its pods go
    gpu_vendor: Literal["nvidia", "amd", "auto"] = "auto"  # whose GPU variables its children get
    # More variables (names, or prefixes ending in *) the tested code inherits from the
    # orchestrator, besides the GPU set of `gpu_vendor` that a runner with GPUs passes by default.
    pass_env: list[str] = Field(default_factory=list)
    # The host framework stack (torch, JAX, CuPy) its environments reuse: a Python's path, or a
    # variable holding it (`${NIGHTLY_BASE_PYTHON:-}`: none where unset).
    base_python: Annotated[str | None, AfterValidator(check_base_python)] = None

    @field_validator("pass_env")
    @classmethod
    def _no_secrets(cls, names: list[str]) -> list[str]:
        for name in names:
            problem = secret_variable_problem(name)
            if problem:
                raise ValueError(f"{name!r}: {problem}")
        return names

    def passed_variables(self) -> tuple[str, ...]:
        """What the tested code on this runner inherits beyond the basic set: its GPU variables
        (when it has GPUs) and its own `pass_env`."""
        gpu: tuple[str, ...] = ()
        if self.gpus != 0:
            vendors = ("nvidia", "amd") if self.gpu_vendor == "auto" else (self.gpu_vendor,)
            gpu = tuple(v for vendor in vendors for v in GPU_VARIABLES[vendor])
        return (*dict.fromkeys((*gpu, *self.pass_env)),)

    @model_validator(mode="after")
    def _placement_of_its_kind(self) -> Runner:
        if self.kind != "kubernetes":
            if self.kubernetes is not None:
                raise ValueError(f"kubernetes: only a runner of kind kubernetes takes it, not '{self.kind}'")
            return self
        if self.kubernetes is None:
            raise ValueError(
                "kubernetes: a runner of kind kubernetes says where its pods go: expected a "
                "'kubernetes' block with at least 'namespace'"
            )
        cards = self.kubernetes.devices()
        if "gpus" in self.model_fields_set and self.gpus != cards:
            raise ValueError(
                f"gpus: a kubernetes runner's pod sees the cards kubernetes.extended_resources asks for "
                f"({cards}); leave 'gpus' out or make it {cards} (got {self.gpus!r})"
            )
        return self
