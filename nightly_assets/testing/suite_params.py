"""A test_suite stage's `params`: the suite's environment, a Bazel suite's workspace, and what only
a TPU VM takes. Here, below the stage kind, for the runner backends and the TPU PR tier to read."""

from pydantic import Field

from nightly_assets.catalog.kinds import RepoParams
from nightly_assets.tpu.stage import TpuSuiteParams


class TestSuiteParams(RepoParams, TpuSuiteParams):
    __test__ = False  # not a pytest class

    # for the suite's process (here, in the image's container or pod); {arch}, {target}, target params
    env: dict[str, str] = Field(default_factory=dict)
    workspace: str = ""  # a Bazel suite's workspace folder inside the checkout

    def runner_kinds(self, accepted: frozenset[str]) -> frozenset[str]:
        # Settings that only one runner kind reads pin the stage to it.
        if self.model_fields_set & set(TpuSuiteParams.model_fields):
            return accepted & {"tpu_vm"}
        if self.env:
            return accepted & {"local", "docker", "kubernetes"}
        return accepted
