"""`python -m benchmarks [NAME ...]`: run every benchmark (or the named ones) and print the ratios
(see docs/testing.md). NAME is a module of this package, e.g. `python -m benchmarks tpu_overhead`."""

import sys
from collections.abc import Callable

from benchmarks import (
    bazel_cache,
    cli_startup,
    definitions_load,
    environment_reuse,
    flaky_detection,
    image_cache,
    junit_streaming,
    night_overhead,
    regression_detection,
    results_site,
    sharding,
    third_party_night,
    tpu_overhead,
    warehouse_history,
    warehouse_write,
)

BENCHMARKS: dict[str, Callable[[], dict[str, float]]] = {
    "definitions_load": definitions_load.main,
    "cli_startup": cli_startup.main,
    "night_overhead": night_overhead.main,
    "image_cache": image_cache.main,
    "tpu_overhead": tpu_overhead.main,
    "bazel_cache": bazel_cache.main,
    "junit_streaming": junit_streaming.main,
    "warehouse_write": warehouse_write.main,
    "warehouse_history": warehouse_history.main,
    "regression_detection": regression_detection.main,
    "flaky_detection": flaky_detection.main,
    "environment_reuse": environment_reuse.main,
    "third_party_night": third_party_night.main,
    "results_site": results_site.main,
    "sharding": sharding.main,
}


def main(names: list[str]) -> None:
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    ratios: dict[str, float] = {}
    for name in names or BENCHMARKS:
        ratios.update(BENCHMARKS[name]())
    width = max([28, *(len(name) for name in ratios)])
    print("\nratios:")
    for name, value in ratios.items():
        print(f"  {name:<{width}} {value:6.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
