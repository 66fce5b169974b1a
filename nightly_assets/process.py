"""Run an external command the one way this project does: argument list, timeout, output to a log."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# What a child process inherits from the orchestrator: enough to find programs, a home, a locale
# and the system's CA certificates. Nothing else: the orchestrator's environment holds tokens and
# passwords (GitHub, Slack, RBE, registries, the warehouse URL), and the children are the code
# under test (its build backend, its tests, its benchmarks). A command that needs a setting is
# given it by name through `env`.
INHERITED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    }
)
INHERITED_PREFIXES = ("LC_",)

# What GPU code needs from its host, passed to the tested code on a runner with GPUs: where the
# driver and runtime libraries are, which devices and capabilities the container runtime granted,
# and the runtimes' own tuning. `*` ends a prefix. The *_VISIBLE_DEVICES a suite is handed override
# the orchestrator's.
GPU_VARIABLES: dict[str, tuple[str, ...]] = {
    "nvidia": ("LD_LIBRARY_PATH", "CUDA_*", "NVIDIA_*", "NCCL_*", "CUDNN_*", "TRITON_*", "XLA_FLAGS"),
    "amd": (
        "LD_LIBRARY_PATH",
        "ROCM_*",
        "HIP_*",
        "HSA_*",
        "ROCR_*",
        "HCC_*",
        "MIOPEN_*",
        "RCCL_*",
        "NCCL_*",
        "GPU_DEVICE_ORDINAL",
        "TRITON_*",
        "XLA_FLAGS",
    ),
}

# A variable that may hold a credential never reaches the code under test, whatever a runner's
# `pass_env` says: by what its name contains, by any of its `_`-separated words that is a short
# name for one (CUDA_PWD, NCCL_IB_PASS, NVIDIA_NGC_KEY, HSA_CREDS: the GPU prefixes pass
# everything else), and by the prefixes of our own settings and of the services whose clients
# read credentials from the environment.
_SECRET_WORDS = re.compile(r"TOKEN|PASSW|SECRET|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|AUTH|COOKIE|SESSION")
_SECRET_NAME_WORDS = frozenset({"PWD", "PW", "PASS", "PASSWD", "KEY", "KEYS", "CRED", "CREDS", "PAT", "JWT"})
_SECRET_PREFIXES = (
    "NIGHTLY_",
    "AWS_",
    "SLACK_",
    "GITHUB_",
    "GH_",
    "GOOGLE_",
    "GCLOUD_",
    "TWINE_",
    "PIP_",
    "DOCKER_",
    "KUBE",
    "DAGSTER_",
    "MYSQL",
    "PG",
    "DATABASE_",
    "AZURE_",
    "ACR_",
    "SSH_",
)


def names_a_secret(name: str) -> bool:
    """A variable whose name says it holds a credential (a token, password, key...)."""
    upper = name.upper()
    words = upper.split("_")  # a word of a longer name: PWD alone is the shell's working directory
    return bool(_SECRET_WORDS.search(upper)) or (len(words) > 1 and not _SECRET_NAME_WORDS.isdisjoint(words))


def secret_variable_problem(pattern: str) -> str | None:
    """Why a pass-through entry (a name, or a prefix ending in `*`) is refused; None: it may pass."""
    if not re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)?\*?", pattern) or not pattern:
        return "expected a variable name, or a prefix ending in * (e.g. HSA_*)"
    is_prefix = pattern.endswith("*")
    stem = pattern.removesuffix("*").upper()
    if is_prefix and len(stem) < 3:
        return "a prefix this short would pass nearly every variable, secrets included; name them"
    names_secret = names_a_secret(stem.rstrip("_")) or stem.startswith(_SECRET_PREFIXES)
    if names_secret or (is_prefix and any(p.startswith(stem) for p in _SECRET_PREFIXES)):
        return (
            "it names (or could match) a secret: tokens, passwords, keys and the orchestrator's own "
            "settings (NIGHTLY_*, the warehouse URL, AWS_*, SLACK_*, ...) never reach the tested code"
        )
    return None


def passed_variables(patterns: Sequence[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The orchestrator's variables that `patterns` name (names, or prefixes ending in `*`), less any
    that looks like a secret."""
    names = {p for p in patterns if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))
    return {
        k: v
        for k, v in (os.environ if environ is None else environ).items()
        if (k in names or (prefixes and k.startswith(prefixes))) and secret_variable_problem(k) is None
    }


def child_env(extra: Mapping[str, str] | None = None, passed: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a child process: the allow-listed variables of ours, those `passed`
    names (a runner's GPU set and `pass_env`), then `extra`."""
    inherited = {k: v for k, v in os.environ.items() if k in INHERITED or k.startswith(INHERITED_PREFIXES)}
    return {**inherited, **passed_variables(passed), **(extra or {})}


class CommandError(RuntimeError):
    """A command that could not start, timed out or (when asked) exited non-zero; says which and why."""


@dataclass(frozen=True)
class CommandResult:
    args: tuple[str, ...]
    returncode: int
    output: str
    log_path: Path | None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def run_command(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 3600,
    log_path: Path | None = None,
    check: bool = True,
    scratch_home: bool = False,
    passed: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
    on_start: Callable[[int], None] | None = None,
) -> CommandResult:
    """Run `args` (never a shell string) with the allow-listed environment plus `env`, capturing
    stdout+stderr into `log_path` when given. `scratch_home`: the command is the code under test
    (a build backend, a test suite, a benchmark), so HOME is an empty folder of its own, not ours
    with its credential files (~/.docker/config.json, ~/.netrc, ~/.git-credentials, gcloud's).
    `passed`: more of our variables the command inherits (names or prefixes ending in `*`).
    `pass_fds`: descriptors the command inherits (GPU lease locks, held as long as it runs);
    `on_start(pid)` is told its process (the leader of its own process group) once it runs."""
    if scratch_home:
        with tempfile.TemporaryDirectory(prefix="nightly-home-") as home:
            return run_command(
                args,
                cwd=cwd,
                env={**(env or {}), "HOME": home},
                timeout_s=timeout_s,
                log_path=log_path,
                check=check,
                passed=passed,
                pass_fds=pass_fds,
                on_start=on_start,
            )
    argv = tuple(str(a) for a in args)
    full_env = child_env(env, passed)
    try:
        # Its own process group: a timeout or an interrupted night ends the command's children too.
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except FileNotFoundError as exc:
        raise CommandError(f"cannot run {argv[0]!r}: {exc.strerror}") from None
    with _RUNNING_LOCK:
        _RUNNING[proc.pid] = threading.get_ident()
    try:
        if on_start is not None:
            on_start(proc.pid)
        stdout, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        partial = _end_group(proc)
        _write_log(log_path, partial)
        raise CommandError(
            f"{program_name(argv)} timed out after {timeout_s:.0f} s; last output:\n"
            + "\n".join(partial.splitlines()[-20:])
        ) from None
    except BaseException:  # interrupted (Ctrl-C, SIGTERM, a cancelled run): leave nothing running
        _write_log(log_path, _end_group(proc))
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(proc.pid, None)
    _write_log(log_path, stdout)
    result = CommandResult(argv, proc.returncode, stdout, log_path)
    if check and proc.returncode != 0:
        raise CommandError(
            f"{program_name(argv)} exited with {proc.returncode}: {cause(stdout)}\n"
            f"last output:\n{result.tail()}"
        )
    return result


def program_name(argv: Sequence[str]) -> str:
    """What ran, briefly: `pip` for `.../python -m pip install ...`, else the program's file name."""
    if len(argv) > 2 and argv[1] == "-m":
        return argv[2]
    return Path(argv[0]).name


# Lines that state why a command failed, in the tools the nights run (pip, build backends, pytest).
_CAUSE_PREFIXES = ("ERROR", "error:", "Error:", "E ", "FAILED", "fatal:")
# A tool reporting that the tool it ran failed (build running pip): the cause is further up.
_WRAPPER_MARKS = ("returned non-zero exit status", "exited with")


def cause(output: str) -> str:
    """The line of `output` that says why the command failed: the last error line that is not a
    wrapper's "the command I ran failed", else the last error line, else the last line."""
    lines = [line.strip().removeprefix("< ").strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(_CAUSE_PREFIXES)]
    direct = [line for line in errors if not any(mark in line for mark in _WRAPPER_MARKS)]
    found = (direct or errors or lines or ["no output"])[-1]
    return found[:500]


def _write_log(log_path: Path | None, text: str) -> None:
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(text)


# The process groups of the commands running now (their leaders' pids), so that an interrupted
# night whose stages run in threads (night_threads.py) can end them from the main thread.
_RUNNING: dict[int, int] = {}  # process group -> the thread that runs it
_RUNNING_LOCK = threading.Lock()


def end_running_commands(sparing: Collection[int] = ()) -> None:
    """TERM every command this process is running (their process groups) but those of the threads
    `sparing` (idents: cleanup that must finish); each command's own run_command then sees it end
    and finishes as an interrupted or failed command does."""
    with _RUNNING_LOCK:
        groups = [group for group, thread in _RUNNING.items() if thread not in sparing]
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)


def _end_group(proc: subprocess.Popen[str], grace_s: float = 5.0) -> str:
    """Stop the command's whole process group (TERM, then KILL after `grace_s`); its output so far."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            output, _ = proc.communicate(timeout=grace_s)
            return output or ""
        except subprocess.TimeoutExpired:
            continue
    try:  # a grandchild that left the group (setsid) may hold the pipe open: do not wait for it
        output, _ = proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait(timeout=grace_s)
        return ""
    return output or ""
