"""Runs inside a test container: pytest (or collect-only), reported through Dagster Pipes.

Copied into the container next to the `dagster_pipes` module before it starts, so any image with a
Python 3.9+ and pytest can run a suite. Stdlib only. Results land in the output folder the
orchestrator copies back: junit.xml, output.log (pytest or the program) and result.json. In a pod,
whose files cannot be copied out, `--report-files` sends them back as Pipes custom messages instead
(gzip, base64, in parts that keep each log line short).
"""

import argparse
import base64
import gzip
import json
import os
import subprocess
import sys
import time

from dagster_pipes import open_dagster_pipes

USABLE_EXIT_CODES = (0, 1, 5)  # passed, some failed, nothing collected
# Characters of base64 per message: a container runtime splits log lines past 16 KiB.
FILE_PART_CHARS = 12000


def report_files(pipes, folder):
    """Every file in `folder` as custom messages {nightly_file, part, parts, gzip_base64}."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as handle:
            data = base64.b64encode(gzip.compress(handle.read())).decode("ascii")
        parts = [data[i : i + FILE_PART_CHARS] for i in range(0, len(data), FILE_PART_CHARS)] or [""]
        for index, part in enumerate(parts):
            pipes.report_custom_message(
                {"nightly_file": name, "part": index, "parts": len(parts), "gzip_base64": part}
            )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rootdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--collect-only", action="store_true")
    parser.add_argument("--command", help="a JSON argument list to run instead of pytest")
    parser.add_argument("--report-files", action="store_true", help="send the outputs as Pipes messages")
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
        if args.report_files:
            report_files(pipes, args.out)
    # Collection errors interrupt pytest (2) after it wrote them to the JUnit file: a report to keep.
    collection_errors = returncode == 2 and (args.collect_only or os.path.exists(f"{args.out}/junit.xml"))
    usable = returncode == 0 or (not args.command and (returncode in USABLE_EXIT_CODES or collection_errors))
    return 0 if usable else 3


if __name__ == "__main__":
    sys.exit(main())
