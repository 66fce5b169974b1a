"""Runs ON the TPU VM (uploaded beside the sources): unpack, install, pytest, timing JSON.

Standard library only, Python 3.8+: it runs under whatever Python the VM image has. Every
value arrives as its own argv item (the orchestrator `shlex.join`s them), so nothing here is
ever parsed by a shell.
"""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time


def _parse(argv):
    parser = argparse.ArgumentParser(prog="remote_suite.py")
    parser.add_argument("--source", required=True, help="tar.gz of the pinned checkout")
    parser.add_argument("--junit", required=True, help="where pytest writes its JUnit XML")
    parser.add_argument("--timing", required=True, help="the timing JSON the suite writes (or we do)")
    parser.add_argument("--markers", default="")
    parser.add_argument("--venv", action="store_true", help="make a venv (system site packages) first")
    parser.add_argument("--install", action="store_true", help="pip install -e the checkout")
    parser.add_argument("--pip-arg", action="append", default=[], dest="pip_args")
    parser.add_argument("--pytest-arg", action="append", default=[], dest="pytest_args")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("paths", nargs="*")
    return parser.parse_args(argv)


def _unpack(source, dest):
    with tarfile.open(source) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, filter="data")
        else:  # Python < 3.12 without the backport: refuse escaping members ourselves
            root = os.path.realpath(dest)
            for member in archive.getmembers():
                target = os.path.realpath(os.path.join(dest, member.name))
                if (
                    not (target == root or target.startswith(root + os.sep))
                    or member.issym()
                    or member.islnk()
                ):
                    sys.exit(f"remote_suite: refusing archive member {member.name!r}")
            archive.extractall(dest)  # noqa: S202  # every member checked above


SETUP_FAILED = 90  # not a pytest exit code: the orchestrator reports a setup step, not tests


def _step(name, command):
    print(f"remote_suite: {name}: {' '.join(command)}", flush=True)
    returncode = subprocess.run(command).returncode
    if returncode != 0:
        print(f"remote_suite: {name} failed (exit {returncode})", flush=True)
        sys.exit(SETUP_FAILED)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    here = os.getcwd()
    code = os.path.join(here, "code")
    _unpack(args.source, code)
    python = sys.executable
    if args.venv:
        _step("venv", [python, "-m", "venv", "--system-site-packages", os.path.join(here, ".venv")])
        python = os.path.join(here, ".venv", "bin", "python")
    if args.install:
        _step(
            "install",
            [python, "-m", "pip", "install", "--disable-pip-version-check", *args.pip_args, "-e", code],
        )
    timing = os.path.join(here, args.timing)  # an absolute --timing stays absolute
    junit = os.path.join(here, args.junit)
    env = dict(os.environ, NIGHTLY_TIMING_FILE=timing, COMMIT=args.commit, GITHUB_SHA=args.commit)
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--junitxml=" + junit]
    if args.markers:
        command += ["-m", args.markers]
    command += args.pytest_args
    started = time.time()
    print("remote_suite: " + " ".join([*command, "--", *args.paths]), flush=True)
    code_ = subprocess.run([*command, "--", *args.paths], cwd=code, env=env).returncode
    elapsed = time.time() - started
    if not os.path.exists(timing):  # seed 003's suites write it themselves; others get pytest's time
        with open(timing, "w") as handle:
            json.dump({"timestamp": started, "elapsed_seconds": elapsed, "commit": args.commit}, handle)
    print(f"remote_suite: pytest exited {code_} after {elapsed:.1f} s", flush=True)
    return code_


if __name__ == "__main__":
    sys.exit(main())
