"""SSH to a run's VM with paramiko: a fresh key per run, host keys pinned from the node's guest
attributes, SFTP up and down, and one remote command streamed to a log under a timeout."""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import posixpath
import re
import shlex
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

PID_FILE = ".nightly-suite.pid"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RECV_WAIT_S = 0.25
_EXIT_STATUS_WAIT_S = 5.0
Ended = Literal["exited", "timeout", "connection_lost", "stopped"]

# What a dropped or refused connection raises: paramiko's SFTP and transport raise a bare
# EOFError when the peer hangs up mid-message.
CONNECTION_ERRORS = (OSError, EOFError, paramiko.SSHException)


class SshError(RuntimeError):
    """The VM could not be reached or used over SSH; the message names user, host and port."""


class SshHostKeyMismatch(SshError):
    """The VM answered with a host key other than the one its node published."""


@dataclass(frozen=True)
class SshKeyPair:
    """A run's key. The private half stays in memory (never on disk, never in a repr or log)."""

    private: paramiko.PKey = field(repr=False)
    public_line: str  # "ssh-ed25519 AAAA... comment", as it goes into the node's ssh-keys metadata


def new_ssh_key(comment: str) -> SshKeyPair:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return SshKeyPair(paramiko.Ed25519Key.from_private_key(io.StringIO(pem)), f"{public.decode()} {comment}")


@dataclass(frozen=True)
class RemoteExit:
    ended: Ended
    exit_code: int | None  # None unless ended == "exited" with an exit status
    detail: str = ""


def connect(
    host: str,
    port: int,
    user: str,
    key: SshKeyPair,
    host_keys: Mapping[str, str],
    timeout_s: float,
    keepalive_s: int,
    log: logging.Logger,
    check: Callable[[], str | None] = lambda: None,
) -> paramiko.SSHClient:
    """Connect, retrying while the fresh VM's sshd and guest agent come up (refused, reset, auth);
    between tries, `check` may give a reason to stop trying (the node is gone).

    With `host_keys` (type -> base64) only those keys are accepted; without, the first key seen
    is (a fresh VM has no known key elsewhere), and a warning says so.
    """
    where = f"{user}@{host}:{port}"
    if not host_keys:
        log.warning("%s: the node published no SSH host key; accepting the first one seen", where)
    deadline = time.monotonic() + timeout_s
    while True:
        client = paramiko.SSHClient()
        alias = host if port == 22 else f"[{host}]:{port}"
        for key_type, value in host_keys.items():
            client.get_host_keys().add(
                alias, key_type, paramiko.PKey.from_type_string(key_type, base64.b64decode(value))
            )
        # Without published keys: a fresh VM has no earlier record of its key anywhere (gcloud
        # does the same); the key is kept in memory only, never saved.
        policy = paramiko.RejectPolicy() if host_keys else paramiko.AutoAddPolicy()
        client.set_missing_host_key_policy(policy)
        try:
            client.connect(
                hostname=host,
                port=port,
                username=user,
                pkey=key.private,
                timeout=10,
                banner_timeout=15,
                auth_timeout=15,
                allow_agent=False,
                look_for_keys=False,
            )
        except paramiko.BadHostKeyException:
            client.close()
            raise SshHostKeyMismatch(
                f"{where} answered with a host key other than the one its node published: refusing to connect"
            ) from None
        except CONNECTION_ERRORS as exc:
            client.close()
            last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise SshError(
                    f"cannot reach {where} over SSH within {timeout_s:.0f} s: {last_error}"
                ) from None
            trouble = check()
            if trouble is not None:
                raise SshError(f"stopped trying {where} ({last_error}): {trouble}") from None
            time.sleep(1.0)
            continue
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(keepalive_s)
        return client


def remote_command(workdir: str, argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The one line the remote shell runs: every piece is quoted, so no argument is ever code.

    It records its PID (sshd made it a session leader, so it is also the process group to kill on
    a timeout) and `exec`s the suite.
    """
    if not argv:
        raise ValueError("suite argv: expected at least the program to run, got an empty list")
    for name in env:
        if _ENV_NAME.fullmatch(name) is None:
            raise ValueError(f"suite env: {name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    command = list(argv)
    if env:
        if "=" in command[0]:
            raise ValueError(f"suite argv[0] {command[0]!r} contains '=': env would take it for a variable")
        command = ["env", "--", *(f"{name}={value}" for name, value in env.items()), *command]
    quoted_dir = shlex.quote(workdir)
    return f"cd -- {quoted_dir} && echo $$ > {PID_FILE} && exec {shlex.join(command)}"


def run_remote(
    client: paramiko.SSHClient,
    command: str,
    log_path: Path,
    timeout_s: float,
    on_output: Callable[[str], None] | None,
    check: Callable[[], str | None],
    check_every_s: float,
) -> RemoteExit:
    """Run `command`, appending its output (stdout + stderr) to `log_path` as it comes.

    `check` runs every `check_every_s`: a reason it returns stops the run ("stopped"). A channel
    that closes without an exit status on a dead transport is "connection_lost".
    """
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        return RemoteExit("connection_lost", None, "the SSH connection was closed before the suite started")
    channel = transport.open_session(timeout=30)
    channel.set_combine_stderr(True)
    channel.settimeout(_RECV_WAIT_S)
    channel.exec_command(command)
    started = time.monotonic()
    next_check = started + check_every_s
    try:
        with log_path.open("ab") as log:
            while True:
                try:
                    data = channel.recv(65536)
                except TimeoutError:  # socket.timeout: nothing within _RECV_WAIT_S
                    data = None
                if data:
                    log.write(data)
                    log.flush()
                    if on_output is not None:
                        on_output(data.decode(errors="replace"))
                    continue
                if data == b"":  # end of output: the command ended or the connection did
                    break
                now = time.monotonic()
                if now - started >= timeout_s:
                    return RemoteExit("timeout", None, f"the suite ran past its {timeout_s:.0f} s timeout")
                if now >= next_check:
                    next_check = now + check_every_s
                    reason = check()
                    if reason is not None:
                        return RemoteExit("stopped", None, reason)
        if channel.status_event.wait(_EXIT_STATUS_WAIT_S) and channel.exit_status >= 0:
            return RemoteExit("exited", channel.exit_status)
        # sshd ends a channel with EOF whatever ended the command; a channel closed by a dying
        # transport has none.
        if not channel.eof_received or not transport.is_active():
            return RemoteExit("connection_lost", None, "the SSH connection dropped while the suite ran")
        return RemoteExit("exited", None, "the suite ended without an exit status (killed by a signal)")
    finally:
        channel.close()


def kill_remote(client: paramiko.SSHClient, workdir: str, log: logging.Logger) -> None:
    """Best effort: SIGTERM the suite's process group (its PID file says which) before the VM goes."""
    try:
        with client.open_sftp() as sftp, sftp.open(posixpath.join(workdir, PID_FILE)) as handle:
            pid = handle.read(32).decode().strip()
        if not pid.isdigit():
            return
        _, stdout, _ = client.exec_command(shlex.join(["kill", "-TERM", "--", f"-{pid}"]), timeout=10)
        stdout.channel.recv_exit_status()
    except CONNECTION_ERRORS as exc:
        log.info("could not stop the remote suite (the VM is deleted next anyway): %s", type(exc).__name__)


def upload(sftp: paramiko.SFTPClient, uploads: Mapping[str, Path], workdir: str) -> None:
    """Put each local file or folder at its path under `workdir` (folders recursively, modes kept)."""
    for remote_name, local in uploads.items():
        remote = posixpath.join(workdir, check_remote_name(remote_name, "upload"))
        if not local.exists():
            raise FileNotFoundError(f"suite upload {remote_name!r}: local path {local} does not exist")
        sftp_makedirs(sftp, posixpath.dirname(remote))
        if local.is_dir():
            for path in sorted(local.rglob("*")):
                target = posixpath.join(remote, path.relative_to(local).as_posix())
                if path.is_dir():
                    sftp_makedirs(sftp, target)
                else:
                    sftp_makedirs(sftp, posixpath.dirname(target))
                    _put(sftp, path, target)
        else:
            _put(sftp, local, remote)


def fetch(
    sftp: paramiko.SFTPClient, remote_names: Sequence[str], workdir: str, out_dir: Path
) -> dict[str, Path]:
    """Copy the named remote files (relative to `workdir`, or absolute) into `out_dir`; skip missing ones."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fetched: dict[str, Path] = {}
    for name in remote_names:
        remote = posixpath.join(workdir, check_fetch_name(name))  # an absolute name stays absolute
        local = out_dir / posixpath.basename(remote)
        try:
            sftp.get(remote, str(local))
        except FileNotFoundError:
            local.unlink(missing_ok=True)
            continue
        fetched[name] = local
    return fetched


def check_remote_name(name: str, what: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or ".." in parts:
        raise ValueError(f"suite {what} {name!r}: expected a relative path inside the work dir, without '..'")
    return name


def check_fetch_name(name: str) -> str:
    """A file to bring back: relative to the work dir (no '..') or absolute, naming a file."""
    if name.startswith("/"):
        if posixpath.basename(name) in ("", ".", "..") or ".." in name.split("/"):
            raise ValueError(f"suite fetch {name!r}: expected an absolute path to a file, without '..'")
        return name
    return check_remote_name(name, "fetch")


def sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    if path in ("", "/", "."):
        return
    try:
        if stat.S_ISDIR(sftp.stat(path).st_mode or 0):
            return
        raise SshError(f"remote path {path} exists and is not a directory")
    except FileNotFoundError:
        sftp_makedirs(sftp, posixpath.dirname(path))
        try:
            sftp.mkdir(path)
        except OSError:
            # Made meanwhile by another run sharing the folder (shards' VMs on the tests' one sshd).
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                    return
            raise


def _put(sftp: paramiko.SFTPClient, local: Path, remote: str) -> None:
    sftp.put(str(local), remote)
    sftp.chmod(remote, local.stat().st_mode & 0o777)
