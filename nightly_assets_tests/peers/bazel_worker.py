"""A small remote-execution worker ("bot") for the BuildGrid peer, standing in for buildbox-worker
(not installable here). Each bot is a thread with its own bot session on BuildGrid's Bots API
(``google.devtools.remoteworkers.v1test2``) and a capacity of one lease. For each lease it fetches
the Action, Command and input root from the CAS, stages the input tree in a temporary folder, runs
the Command's argv there (its environment only, its working directory, no shell), uploads the
declared outputs (files, and folders as Trees) and stdout/stderr, and completes the lease with the
ActionResult. Every action it ran is appended to a JSON-lines log (read back as
``buildgrid.ExecutedAction``), so a test can tell that an action ran here and not on the Bazel
client's machine.

CAS transfers reuse BuildGrid's own client helpers (``buildgrid.server.client.cas``). It runs in a
process of its own (``python -m nightly_assets_tests.peers.bazel_worker``, started and stopped by
the ``buildgrid_execution`` fixture): BuildGrid's generated protos register ``google/api/*.proto``
again, which the test process already has from googleapis-common-protos.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2.remote_execution_pb2 import (
    Action,
    ActionResult,
    Command,
    Digest,
    OutputDirectory,
    OutputFile,
)
from buildgrid._protos.google.devtools.remoteworkers.v1test2.bots_pb2 import (
    BotSession,
    BotStatus,
    CreateBotSessionRequest,
    Lease,
    LeaseState,
    UpdateBotSessionRequest,
)
from buildgrid._protos.google.devtools.remoteworkers.v1test2.bots_pb2_grpc import BotsStub
from buildgrid._protos.google.rpc import code_pb2
from buildgrid.server.client.cas import download, upload
from buildgrid.server.utils.digests import create_digest

from nightly_assets_tests.peers.buildgrid import ExecutedAction

# The server holds a bot's UpdateBotSession until work comes or 80% of the call's deadline passes;
# a bot waiting on it is stopped by cancelling the call.
POLL_DEADLINE_S = 30.0
HEARTBEAT_S = 10.0  # a bot running a long action tells the server it is alive this often
RETRY_PAUSE_S = 0.5
KILL_GRACE_S = 5.0


class _Stopped(Exception):
    """The worker is stopping: leave the bot loop."""


class BazelWorker:
    """`bots` bot threads executing leases of `instance_name` on the BuildGrid at `address`
    (host:port, insecure); actions are staged under `root`, and logged to `log_path`."""

    def __init__(
        self, address: str, instance_name: str, root: Path, log_path: Path, *, bots: int = 4
    ) -> None:
        self.address = address
        self.instance_name = instance_name
        self.root = root
        self.log_path = log_path
        self._bots = bots
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._calls: set[grpc.Future] = set()
        self._channel: grpc.Channel | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._channel = grpc.insecure_channel(self.address)
        for index in range(self._bots):
            bot_id = f"nightly-bot-{uuid.uuid4().hex[:8]}-{index}"
            thread = threading.Thread(target=self._bot_loop, args=(bot_id,), name=bot_id, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._write({"started": [thread.name for thread in self._threads], "pid": os.getpid()})

    def wait(self, parent_pid: int) -> None:
        """Until stopped, or until the process that started this one is gone."""
        while not self._stop.wait(1.0):
            if os.getppid() != parent_pid:
                self._log_error("", f"parent process {parent_pid} is gone: stopping")
                self._stop.set()

    def request_stop(self) -> None:
        """Ask the bots to stop (safe in a signal handler); `stop` then waits for them."""
        self._stop.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.cancel()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._channel is not None:
            self._channel.close()
        alive = [thread.name for thread in self._threads if thread.is_alive()]
        if alive:
            raise RuntimeError(f"worker bots still running after {timeout_s:.0f} s: {', '.join(alive)}")

    # -- the Bots API --

    def _bot_loop(self, bot_id: str) -> None:
        assert self._channel is not None
        bots = BotsStub(self._channel)
        while not self._stop.is_set():
            try:
                self._session(bots, bot_id)
            except _Stopped:
                return
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    return
                self._log_error(
                    bot_id, f"bot session failed, starting a new one: {exc.code()}: {exc.details()}"
                )
                self._stop.wait(RETRY_PAUSE_S)

    def _session(self, bots: BotsStub, bot_id: str) -> None:
        """One bot session: long-poll for a lease, run it, report it, until stopped or failing."""
        created = CreateBotSessionRequest(
            parent=self.instance_name, bot_session=BotSession(bot_id=bot_id, status=BotStatus.OK)
        )
        session: BotSession = self._call(bots.CreateBotSession.future(created, timeout=POLL_DEADLINE_S))
        while True:
            for lease in [lease for lease in session.leases if lease.state == LeaseState.ACTIVE]:
                self._run_lease(bots, session, Lease(id=lease.id, payload=lease.payload), bot_id)
            update = UpdateBotSessionRequest(name=session.name, bot_session=session)
            session = self._call(bots.UpdateBotSession.future(update, timeout=POLL_DEADLINE_S))

    def _run_lease(self, bots: BotsStub, session: BotSession, lease: Lease, bot_id: str) -> None:
        """Run the lease's action (`lease`: a copy, as heartbeats replace `session`'s) in a thread,
        sending heartbeats meanwhile; leave the lease COMPLETED with its result in `session`."""
        outcome: list[tuple[ActionResult, int, str]] = []
        runner = threading.Thread(target=lambda: outcome.append(self._execute(lease, bot_id)), daemon=True)
        runner.start()
        while runner.is_alive():
            runner.join(HEARTBEAT_S)
            if runner.is_alive() and not self._stop.is_set():
                heartbeat = UpdateBotSessionRequest(name=session.name, bot_session=session)
                session.CopyFrom(self._call(bots.UpdateBotSession.future(heartbeat, timeout=POLL_DEADLINE_S)))
        if not outcome:  # _execute logs its own failures; only an interpreter shutdown gets here
            raise _Stopped
        result, code, message = outcome[0]
        for held in session.leases:
            if held.id == lease.id:
                held.state = LeaseState.COMPLETED
                held.result.Pack(result)
                held.status.code = code
                held.status.message = message

    def _call(self, call: grpc.Future) -> Any:
        """Wait for an RPC, cancelling it if the worker stops meanwhile."""
        with self._lock:
            self._calls.add(call)
        try:
            if self._stop.is_set():
                call.cancel()
            try:
                return call.result()
            except grpc.FutureCancelledError:
                raise _Stopped from None
            except grpc.RpcError:
                if self._stop.is_set():
                    raise _Stopped from None
                raise
        finally:
            with self._lock:
                self._calls.discard(call)

    # -- running one action --

    def _execute(self, lease: Lease, bot_id: str) -> tuple[ActionResult, int, str]:
        """(result, status code, message) of the lease's action; the worker's own failures give
        an UNKNOWN status, which BuildGrid does not retry and Bazel reports as a remote error."""
        started = time.monotonic()
        action, action_digest, command = Action(), Digest(), Command()
        argv: tuple[str, ...] = ()
        try:
            assert self._channel is not None
            if lease.payload.Is(Action.DESCRIPTOR):
                lease.payload.Unpack(action)
                action_digest = create_digest(action.SerializeToString())
            else:
                lease.payload.Unpack(action_digest)
                with download(self._channel, instance=self.instance_name) as downloader:
                    downloader.get_message(action_digest, action)
            with tempfile.TemporaryDirectory(prefix="action-", dir=self.root) as scratch:
                input_root = Path(scratch) / "root"
                with download(self._channel, instance=self.instance_name) as downloader:
                    downloader.get_message(action.command_digest, command)
                    downloader.download_directory(action.input_root_digest, str(input_root))
                argv = tuple(command.arguments)
                result, code, message = self._run_command(action, command, input_root, Path(scratch))
        except Exception as exc:  # the worker's own failure: reported to Bazel, logged for the test
            message = f"worker {bot_id} failed on action {_digest_text(action_digest)}: {exc!r}"
            self._log_error(bot_id, message)
            result, code = ActionResult(exit_code=-1), code_pb2.UNKNOWN
        result.execution_metadata.worker = bot_id
        record = ExecutedAction(
            bot_id=bot_id,
            action_digest=_digest_text(action_digest),
            argv=argv,
            working_directory=command.working_directory,
            exit_code=result.exit_code,
            output_files=tuple(output.path for output in result.output_files),
            output_directories=tuple(output.path for output in result.output_directories),
            status=code_pb2.Code.Name(code),
            duration_s=round(time.monotonic() - started, 3),
        )
        self._log(record)
        return result, code, message if code != code_pb2.OK else ""

    def _run_command(
        self, action: Action, command: Command, input_root: Path, scratch: Path
    ) -> tuple[ActionResult, int, str]:
        workdir = input_root / command.working_directory
        workdir.mkdir(parents=True, exist_ok=True)
        declared = _unique([*command.output_files, *command.output_directories, *command.output_paths])
        for path in declared:  # the worker makes the outputs' parents; the action makes the outputs
            (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        env = {variable.name: variable.value for variable in command.environment_variables}
        timeout_s = action.timeout.ToTimedelta().total_seconds() if action.HasField("timeout") else None
        stdout_path, stderr_path = scratch / "stdout", scratch / "stderr"
        code, message = code_pb2.OK, ""
        with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
            try:
                process = subprocess.Popen(
                    list(command.arguments),
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    start_new_session=True,  # a timeout kills the action's whole process group
                )
            except OSError as exc:  # not found or not executable: what a shell would say
                stderr.write(f"{command.arguments[0]}: {exc.strerror}\n".encode())
                exit_code = 127
            else:
                try:
                    exit_code = process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    exit_code = _kill_group(process)
                    code, message = code_pb2.DEADLINE_EXCEEDED, f"action timed out after {timeout_s:.0f} s"
        result = ActionResult(exit_code=exit_code)
        assert self._channel is not None
        with upload(self._channel, instance=self.instance_name) as uploader:
            result.stdout_digest.CopyFrom(uploader.upload_file(str(stdout_path), queue=False))
            result.stderr_digest.CopyFrom(uploader.upload_file(str(stderr_path), queue=False))
            directories = {*command.output_directories, *command.output_paths}
            for path in declared:
                output = workdir / path
                if output.is_file():
                    digest = uploader.upload_file(str(output), queue=False)
                    executable = os.access(output, os.X_OK)
                    result.output_files.append(OutputFile(path=path, digest=digest, is_executable=executable))
                elif output.is_dir() and path in directories:
                    tree = uploader.upload_tree(str(output), queue=False)
                    result.output_directories.append(OutputDirectory(path=path, tree_digest=tree))
        return result, code, message

    # -- records --

    def _log(self, record: ExecutedAction) -> None:
        self._write({"executed": asdict(record)})

    def _log_error(self, bot_id: str, message: str) -> None:
        self._write({"error": message, "bot_id": bot_id})

    def _write(self, entry: dict[str, Any]) -> None:
        with self._lock, self.log_path.open("a") as log:
            log.write(json.dumps(entry) + "\n")


def _kill_group(process: subprocess.Popen[bytes]) -> int:
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            return process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    return process.wait()


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def _digest_text(digest: Digest) -> str:
    return f"{digest.hash}/{digest.size_bytes}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A remote-execution worker for a BuildGrid peer.")
    parser.add_argument("--address", required=True, help="BuildGrid's host:port (insecure gRPC)")
    parser.add_argument("--instance", required=True, help="the instance whose leases the bots take")
    parser.add_argument("--root", required=True, type=Path, help="where actions are staged")
    parser.add_argument("--log", required=True, type=Path, help="the JSON-lines record of what ran")
    parser.add_argument("--bots", type=int, default=4, help="bot sessions, one lease each")
    parser.add_argument("--parent-pid", type=int, default=os.getppid(), help="stop when it is gone")
    args = parser.parse_args(argv)
    worker = BazelWorker(args.address, args.instance, args.root, args.log, bots=args.bots)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: worker.request_stop())
    signal.signal(signal.SIGINT, lambda _signum, _frame: worker.request_stop())
    worker.start()
    worker.wait(args.parent_pid)
    worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
