"""A toy benchmark for the sweep's tests and the local night: hashes for a short time, prints one JSON line.

It measures real work on this machine (SHA-256 blocks per second, standing in for "images") and
reports it for the point's NODES x RANKS_PER_NODE ranks. The ranks are not real: the rate of the one
process is scaled by the rank count and a modelled parallel efficiency, so the report has a
plausible scaling curve to draw. Run stand-alone (stdlib only):

    NODES=2 RANKS_PER_NODE=4 TRIAL=1 python toy_benchmark.py --seconds 0.2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

EFFICIENCY_PER_DOUBLING = 0.93  # every doubling of nodes keeps this share of ideal scaling


def toy_benchmark_argv(seconds: float = 1.0, *extra: str) -> list[str]:
    """The argv that runs this benchmark with this interpreter (the local night's sweep command)."""
    return [sys.executable, os.path.abspath(__file__), "--seconds", f"{seconds:g}", *extra]


def _positive_env(name: str) -> int:
    text = os.environ.get(name, "")
    if not text.isdigit() or int(text) < 1:
        sys.exit(f"toy_benchmark: environment variable {name} must be a positive integer, got {text!r}")
    return int(text)


def _hash_rate(seconds: float) -> float:
    block = b"\0" * 4096
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(64):
            block = hashlib.sha256(block).digest() * 128
        done += 64
    return done / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="how long to compute")
    parser.add_argument("--metric", default="images_per_sec", help="the JSON key of the value")
    parser.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="NODES:RANKS:TRIAL",
        help="exit with 3 at this point (tests: one failing point of a sweep)",
    )
    args = parser.parse_args(argv)
    nodes, ranks, trial = (_positive_env(n) for n in ("NODES", "RANKS_PER_NODE", "TRIAL"))
    if f"{nodes}:{ranks}:{trial}" in args.fail_on:
        print(
            f"toy_benchmark: failing at nodes={nodes} ranks={ranks} trial={trial} as asked", file=sys.stderr
        )
        return 3
    per_rank = _hash_rate(args.seconds)
    efficiency = EFFICIENCY_PER_DOUBLING ** math.log2(nodes)
    value = per_rank * nodes * ranks * efficiency
    record = {args.metric: round(value, 3), "nodes": nodes, "ranks_per_node": ranks, "trial": trial}
    print(f"toy_benchmark: {args.seconds:g} s of SHA-256 on {nodes}x{ranks} (modelled) ranks")
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
