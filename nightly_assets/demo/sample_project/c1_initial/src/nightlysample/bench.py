"""Micro-benchmarks: ``python -m nightlysample.bench --json OUT.json``."""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from nightlysample.ops import matmul, prefix_sum


def _best_seconds(fn: Callable[[], object], repeats: int, number: int) -> float:
    """Fastest of ``repeats`` samples of the seconds one call of ``fn`` takes.

    The minimum, not the median: on a shared machine noise only ever adds time.
    """
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return min(samples)


def run_benchmarks(repeats: int = 7) -> list[dict[str, object]]:
    rng = random.Random(0)
    a = [[rng.random() for _ in range(64)] for _ in range(64)]
    b = [[rng.random() for _ in range(64)] for _ in range(64)]
    xs = [rng.random() for _ in range(100_000)]
    # name -> (kernel call, calls per sample: keeps each sample long enough to time)
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "matmul_64": (lambda: matmul(a, b), 2),
        "prefix_sum_100k": (lambda: prefix_sum(xs), 10),
    }
    return [
        {
            "name": name,
            "value": _best_seconds(fn, repeats, number),
            "unit": "s",
            "lower_is_better": True,
        }
        for name, (fn, number) in cases.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", dest="json_path", help="write the results here")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    benchmarks = run_benchmarks(args.repeats)
    result = {
        "benchmarks": benchmarks,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_seconds": time.perf_counter() - start,
    }
    for bench in benchmarks:
        print(f"{bench['name']:<20} {bench['value']:.6f} s")
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps(result, indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
