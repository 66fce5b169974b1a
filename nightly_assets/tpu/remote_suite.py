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
import xml.etree.ElementTree as ET  # the JUnit pytest just wrote here, nothing foreign


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
    # Confirming failures here, while the VM lives (the suite's confirm: block; the wholesale
    # rule's defaults are testing/flakiness.is_wholesale's): the failing tests alone, by rounds.
    parser.add_argument("--confirm-attempts", type=int, default=0)
    parser.add_argument("--confirm-max-tests", type=int, default=0)
    parser.add_argument("--confirm-timeout", type=float, default=0.0)
    parser.add_argument("--confirm-wholesale-share", type=float, default=0.5)
    parser.add_argument("--confirm-wholesale-min", type=int, default=5)
    # One shard of a planned suite (remote_shard.py, uploaded beside this script as SHARD_PLUGIN):
    # the suite's own selection stands, the plugin keeps this shard's part of it.
    parser.add_argument("--shard-plan", default=None, help="the orchestrator's shard-plan.json")
    parser.add_argument("--shard-index", type=int, default=None, help="this VM's shard, from 1")
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


SHARD_PLUGIN = "nightly_remote_shard"  # the plugin's module name on the VM (beside this script)
SHARD_SELECTED = "shard-selected.json"  # the node ids the shard kept, fetched back
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
    pytest = [python, "-m", "pytest", "-p", "no:cacheprovider", "-rA"]
    selection = [*(["-m", args.markers] if args.markers else []), *args.pytest_args]
    command = [*pytest, "--junitxml=" + junit, *selection, *_shard_args(args, here, env)]
    started = time.time()
    print("remote_suite: " + " ".join([*command, "--", *args.paths]), flush=True)
    code_ = subprocess.run([*command, "--", *args.paths], cwd=code, env=env).returncode
    elapsed = time.time() - started
    if not os.path.exists(timing):  # seed 003's suites write it themselves; others get pytest's time
        with open(timing, "w") as handle:
            json.dump({"timestamp": started, "elapsed_seconds": elapsed, "commit": args.commit}, handle)
    print(f"remote_suite: pytest exited {code_} after {elapsed:.1f} s", flush=True)
    if code_ == 1 and args.confirm_attempts > 0:
        try:
            _confirm(args, [*pytest, *selection], code, env, junit, here)
        except (OSError, ET.ParseError) as exc:  # the suite's own verdict stands, unconfirmed
            print(f"remote_suite: confirmation stopped: {exc}", flush=True)
    return code_


def _shard_args(args, here, env):
    """The plugin's arguments for one shard ([] unsharded); it is imported from this folder."""
    if args.shard_plan is None:
        return []
    if args.shard_index is None:
        sys.exit("remote_suite: --shard-plan needs --shard-index")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return [
        "-p",
        SHARD_PLUGIN,
        "--nightly-shard-plan=" + os.path.join(here, args.shard_plan),
        f"--nightly-shard-index={args.shard_index}",
        "--nightly-shard-selected=" + os.path.join(here, SHARD_SELECTED),
    ]


def _failing(junit, code):
    """(tests that ran, tests that failed, the failing ones' node ids that name a file under
    `code`) of a JUnit file."""
    ran, failed, failing = 0, 0, []
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314  # our own pytest's file
        tags = {child.tag for child in case}
        if "skipped" in tags:
            continue
        ran += 1
        if not tags & {"failure", "error"}:
            continue
        failed += 1
        parts = (case.get("classname") or "").split(".") if case.get("classname") else []
        for cut in range(len(parts), 0, -1):  # as testing/confirm.py's pytest_node_id
            path = "/".join(parts[:cut]) + ".py"
            if os.path.isfile(os.path.join(code, path)):
                failing.append("::".join([path, *parts[cut:], case.get("name") or ""]))
                break
    return ran, failed, failing


def _confirm(args, command, code, env, junit, here):
    """Re-run the failing tests alone, at most --confirm-attempts rounds, each round only what
    still fails, writing confirm-<round>.xml; nothing for a wholesale failure."""
    ran, failed, failing = _failing(junit, code)
    if failed >= max(args.confirm_wholesale_share * ran, args.confirm_wholesale_min):
        print(f"remote_suite: {failed} of {ran} failed: wholesale, not re-run", flush=True)
        return
    failing = failing[: args.confirm_max_tests]
    deadline = time.time() + args.confirm_timeout
    for number in range(1, args.confirm_attempts + 1):
        left = deadline - time.time()
        if not failing or left <= 0:
            return
        out = os.path.join(here, f"confirm-{number}.xml")
        print(f"remote_suite: confirmation re-run {number}: {len(failing)} test(s)", flush=True)
        try:
            subprocess.run([*command, "--junitxml=" + out, "--", *failing], cwd=code, env=env, timeout=left)
        except subprocess.TimeoutExpired:
            print(f"remote_suite: confirmation re-run {number} ran out of time", flush=True)
            return
        if not os.path.exists(out):
            return
        still = set(_failing(out, code)[2])
        failing = [test for test in failing if test in still]


if __name__ == "__main__":
    sys.exit(main())
