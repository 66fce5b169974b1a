"""Benchmark: bf16 matmul throughput (TFLOP/s) and device copy bandwidth (GB/s) on GPU 0.

python -m nightlygpu.bench --json timing.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from nightlygpu import backend, device_name, matmul_flops
from nightlygpu.kernels import time_copy, time_matmul

MATMUL_N = 8192  # large enough to keep a Hopper-class GPU's tensor cores busy
COPY_MB = 1024


def run_benchmarks() -> list[dict]:
    seconds = time_matmul(MATMUL_N)
    results = [
        {
            "name": f"matmul_bf16_{MATMUL_N}",
            "value": matmul_flops(MATMUL_N, MATMUL_N, MATMUL_N) / seconds / 1e12,
            "unit": "TFLOP/s",
            "lower_is_better": False,
        }
    ]
    if backend() == "torch":
        copy_s = time_copy(COPY_MB)
        results.append(
            {
                "name": f"copy_{COPY_MB}mb",
                "value": 2 * COPY_MB * 2**20 / copy_s / 1e9,  # bytes read and written
                "unit": "GB/s",
                "lower_is_better": False,
            }
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", dest="json_path", help="write the results here")
    args = parser.parse_args(argv)
    if backend() is None:
        print("nightlygpu.bench: no GPU visible to torch or CuPy", file=sys.stderr)
        return 2
    start = time.perf_counter()
    benchmarks = run_benchmarks()
    for bench in benchmarks:
        print(f"{bench['name']:<20} {bench['value']:.1f} {bench['unit']} on {device_name()}")
    if args.json_path:
        document = {"benchmarks": benchmarks, "elapsed_seconds": time.perf_counter() - start}
        Path(args.json_path).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
