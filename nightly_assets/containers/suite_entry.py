"""Runs inside a test container: pytest (or collect-only), reported through Dagster Pipes.

Copied into the container next to the `dagster_pipes` module before it starts, so any image with a
Python 3.9+ and pytest can run a suite. Stdlib only. Results land in the output folder the
orchestrator copies back: junit.xml, output.log (pytest or the program) and result.json.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from dagster_pipes import open_dagster_pipes

USABLE_EXIT_CODES = (0, 1, 5)  # passed, some failed, nothing collected


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rootdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--collect-only", action="store_true")
    parser.add_argument("--command", help="a JSON argument list to run instead of pytest")
    parser.add_argument("pytest_args", nargs="*", help="after --: paths, -m markers, more arguments")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open_dagster_pipes() as pipes:
        if args.command:
            argv = json.loads(args.command)
        else:
            argv = [sys.executable, "-m", "pytest", *args.pytest_args, "-q"]
            argv += ["-p", "no:cacheprovider", "--rootdir", args.rootdir]
            if args.collect_only:
                argv.append("--collect-only")
            else:
                argv += [f"--junitxml={args.out}/junit.xml", "-o", "junit_family=xunit2"]
        pipes.log.info(f"running {argv!r} in {args.rootdir}")
        started = time.monotonic()
        timed_out = False
        with open(os.path.join(args.out, "output.log"), "w") as log:
            try:
                returncode = subprocess.run(
                    argv,
                    cwd=args.rootdir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=args.timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                returncode, timed_out = -1, True
        result = {"returncode": returncode, "timed_out": timed_out, "duration_s": time.monotonic() - started}
        with open(os.path.join(args.out, "result.json"), "w") as handle:
            json.dump(result, handle)
        pipes.report_custom_message(result)
        pipes.log.info(f"exit {returncode} after {result['duration_s']:.1f} s")
    # Collection errors interrupt pytest (2) after it wrote them to the JUnit file: a report to keep.
    collection_errors = returncode == 2 and (args.collect_only or os.path.exists(f"{args.out}/junit.xml"))
    usable = returncode == 0 or (not args.command and (returncode in USABLE_EXIT_CODES or collection_errors))
    return 0 if usable else 3


if __name__ == "__main__":
    sys.exit(main())
