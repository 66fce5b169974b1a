"""nightlybazel: a package whose wheel Bazel builds (nightly_assets_tests' Bazel workspace)."""


def answer() -> int:
    return 42
